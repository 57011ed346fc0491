"""Avatar and banner uploads: PNG or JPEG, recognised by content, not by name."""

from __future__ import annotations

import struct

from daemon.http import ApiError

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
_JPEG_SOF = {0xC0, 0xC1, 0xC2, 0xC3, 0xC5, 0xC6, 0xC7, 0xC9, 0xCA, 0xCB, 0xCD, 0xCE, 0xCF}
MAX_SIDE = 20_000


def _unsupported() -> ApiError:
    return ApiError(415, "unsupported_image", "The image must be a PNG or a JPEG file.")


def sniff_image(data: bytes) -> tuple[str, int, int]:
    """(mime type, width, height) of a PNG or JPEG, read from its header; 415 otherwise."""
    if data.startswith(PNG_MAGIC):
        if len(data) < 33 or data[12:16] != b"IHDR":
            raise _unsupported()
        width, height = struct.unpack(">II", data[16:24])
        return _checked("image/png", width, height)
    if data.startswith(b"\xff\xd8\xff"):
        return _checked("image/jpeg", *_jpeg_size(data))
    raise _unsupported()


def _checked(mime: str, width: int, height: int) -> tuple[str, int, int]:
    if not (0 < width <= MAX_SIDE and 0 < height <= MAX_SIDE):
        raise _unsupported()
    return mime, width, height


def _jpeg_size(data: bytes) -> tuple[int, int]:
    i = 2
    while i + 4 <= len(data):
        if data[i] != 0xFF:
            raise _unsupported()
        marker = data[i + 1]
        if marker == 0xFF:  # fill byte
            i += 1
            continue
        if marker in (0xD8, 0x01) or 0xD0 <= marker <= 0xD7:
            i += 2
            continue
        (length,) = struct.unpack(">H", data[i + 2:i + 4])
        if length < 2:
            raise _unsupported()
        if marker in _JPEG_SOF:
            if i + 9 > len(data):
                raise _unsupported()
            height, width = struct.unpack(">HH", data[i + 5:i + 9])
            return width, height
        if marker == 0xDA:  # start of scan before any frame header
            raise _unsupported()
        i += 2 + length
    raise _unsupported()
