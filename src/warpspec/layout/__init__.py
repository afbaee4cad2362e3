"""Shared-memory tile layouts (``shared``: TMA placement, WGMMA descriptors) and WGMMA register fragments
(``fragments``)."""
