"""The typed, immutable IR both back ends read."""
