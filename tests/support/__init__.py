"""What several test folders share: line markers of test kernels, example set-up, modeled timelines."""
