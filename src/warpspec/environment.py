"""Reading environment variables on every launch, cheaply."""

from __future__ import annotations

import os

# os.environ.get costs a microsecond (it encodes the key and decodes the value on every call), more than the rest
# of a launch's back-end choice; CPython's os.environ keeps the encoded mapping in ``_data``, which reads in tens
# of nanoseconds and sees every change made through os.environ.
_environ_data = getattr(os.environ, "_data", None)
_encode_key = getattr(os.environ, "encodekey", None)
_decode_value = getattr(os.environ, "decodevalue", None)
_encoded_keys: dict[str, object] = {}
_decoded: dict[object, str] = {}  # raw value -> decoded, for the few values these variables take


def environment(name: str, default: str) -> str:
    """``os.environ.get(name, default)``, cheaply enough to be read on every launch."""
    if _environ_data is None or _encode_key is None or _decode_value is None:
        return os.environ.get(name, default)
    key = _encoded_keys.get(name)
    if key is None:
        key = _encoded_keys[name] = _encode_key(name)
    raw = _environ_data.get(key)
    if raw is None:
        return default
    text = _decoded.get(raw)
    if text is None:
        if len(_decoded) > 64:
            _decoded.clear()
        text = _decoded[raw] = _decode_value(raw)
    return text
