"""warpspec's tests, laid out as src/warpspec is: tests/<subpackage>/ holds the tests of src/warpspec/<subpackage>/."""
