"""What kernel authors write with: Script, Class, autotune, the language behind ``self`` and Pipeline."""
