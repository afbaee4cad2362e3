"""Shared-memory tile layouts (``shared``: TMA placement, WGMMA descriptors), WGMMA register fragments
(``fragments``) and the register layouts of tensors over a block's threads (``registers``)."""
