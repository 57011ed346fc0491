"""Avatar and banner uploads: decoded with Pillow, capped, re-encoded without metadata.

What the community's public repo receives is never the bytes that were sent: the upload is
decoded (PNG or JPEG only, recognised by content), refused when its declared size passes the
caps below (checked from the header, before any pixel is decoded, so a small file declaring
20000×20000 costs nothing), turned upright by its EXIF orientation, and written again as a
fresh PNG or JPEG that carries no EXIF (GPS, camera, dates), XMP, comments or text chunks.
The ICC colour profile is kept so photos keep their colours. docs/communities.md, "Uploads",
states the same rules for users.
"""

from __future__ import annotations

import asyncio
import io
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

from PIL import Image, ImageOps

from daemon.plugin import ApiError

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"

# The formats Pillow may try: only those the profile lexicon accepts. Fewer decoders, less
# attack surface; anything else is 415 whatever its name or declared type.
_INPUT_FORMATS = ("PNG", "JPEG")

# The lexicon's maxSize for avatar and banner blobs (lexicons/community.commonroom.profile.json).
LEXICON_MAX_BYTES = 1_000_000

JPEG_QUALITY = 90

# A progressive JPEG is decoded once per scan: a small file with tens of thousands of empty
# scans takes a core for half a minute. Real encoders write about 10; refuse far more.
MAX_JPEG_SCANS = 100

# Decoding runs on its own small pool, never the event loop's default executor (which also
# resolves host names for every outbound request): at most two images at a time, however
# many arrive, and a decode that still takes too long is given up on.
_DECODERS = ThreadPoolExecutor(max_workers=2, thread_name_prefix="images")
_DECODE_SLOTS: asyncio.Semaphore | None = None
DECODE_TIMEOUT_SECONDS = 20.0


@dataclass(frozen=True)
class ImageCaps:
    """Largest image accepted for one use: each side, and the pixel count."""

    max_width: int
    max_height: int
    max_pixels: int


# Avatars are shown small and square; banners are wide (Bluesky's are 3:1, 1500×500).
CAPS = {
    "avatar": ImageCaps(max_width=2000, max_height=2000, max_pixels=2000 * 2000),
    "banner": ImageCaps(max_width=3000, max_height=3000, max_pixels=3000 * 1000),
}


@dataclass(frozen=True)
class CleanImage:
    data: bytes
    mime: str
    width: int
    height: int


def _unsupported(detail: str = "") -> ApiError:
    return ApiError(415, "unsupported_image",
                    "The image must be a PNG or a JPEG file" + (f" ({detail})." if detail else "."))


def _too_large(kind: str, found: str) -> ApiError:
    caps = CAPS[kind]
    return ApiError(413, "image_too_large",
                    f"The image {found}; {'an' if kind == 'avatar' else 'a'} {kind} may be at most "
                    f"{caps.max_width}×{caps.max_height} pixels and {caps.max_pixels:,} pixels in all.")


async def clean_image(data: bytes, kind: str, max_bytes: int) -> CleanImage:
    """`reencode` on the image decoders' own threads: decoding and encoding hold the CPU
    for a while and must not stall the event loop, nor take the threads other work needs.
    A decode past `DECODE_TIMEOUT_SECONDS` is answered 415 (its thread finishes alone)."""
    global _DECODE_SLOTS
    if _DECODE_SLOTS is None:
        _DECODE_SLOTS = asyncio.Semaphore(4)  # two decoding, two waiting; the rest wait here
    async with _DECODE_SLOTS:
        work = asyncio.get_running_loop().run_in_executor(_DECODERS, reencode, data, kind, max_bytes)
        try:
            return await asyncio.wait_for(work, DECODE_TIMEOUT_SECONDS)
        except asyncio.TimeoutError:
            raise _unsupported("it takes too long to decode") from None


def jpeg_scans(data: bytes) -> int:
    """How many scans (SOS segments) a JPEG has, walking its markers without decoding."""
    count, i, n = 0, 2, len(data)
    while i + 4 <= n:
        if data[i] != 0xFF:
            return count  # not at a marker: let the decoder judge the rest
        marker = data[i + 1]
        if marker == 0xFF:
            i += 1
            continue
        if marker in (0xD8, 0x01) or 0xD0 <= marker <= 0xD7:
            i += 2
            continue
        if marker == 0xD9:
            return count
        length = int.from_bytes(data[i + 2:i + 4], "big")
        if marker == 0xDA:
            count += 1
            i += 2 + length
            if count > MAX_JPEG_SCANS:
                return count
            # skip the entropy-coded data up to the next marker that is not a stuffed 0xFF00
            # or a restart marker
            while True:
                j = data.find(b"\xff", i)
                if j < 0 or j + 1 >= n:
                    return count
                if data[j + 1] == 0x00 or 0xD0 <= data[j + 1] <= 0xD7:
                    i = j + 2
                    continue
                i = j
                break
            continue
        i += 2 + length
    return count


def reencode(data: bytes, kind: str, max_bytes: int) -> CleanImage:
    """The upload `data` as a fresh PNG (for a PNG) or JPEG (for a JPEG) of at most
    `max_bytes` (and the lexicon's maxSize), upright, without metadata. 415
    `unsupported_image` for anything that is not a decodable PNG or JPEG; 413
    `image_too_large` past the caps for `kind` ("avatar" or "banner"), 413
    `payload_too_large` when the re-encoded image is still too many bytes."""
    caps = CAPS[kind]
    if data[:2] == b"\xff\xd8" and jpeg_scans(data) > MAX_JPEG_SCANS:
        raise _unsupported(f"it has more than {MAX_JPEG_SCANS} scans")
    try:
        # open() reads only the header; a size past Pillow's own bomb limit raises here.
        im = Image.open(io.BytesIO(data), formats=_INPUT_FORMATS)
    except Image.DecompressionBombError:
        raise _too_large(kind, "declares hundreds of millions of pixels") from None
    except Exception:  # noqa: BLE001 - whatever Pillow cannot read is not an image to us
        raise _unsupported() from None
    with im:
        width, height = im.size
        if width < 1 or height < 1:
            raise _unsupported("it has no pixels")
        if width > caps.max_width or height > caps.max_height or width * height > caps.max_pixels:
            raise _too_large(kind, f"is {width}×{height} pixels")
        source_format = im.format
        # The colour profile describes the source's colour space: keep it only when the
        # pixels stay in that space (an RGB or grey profile on RGB or grey pixels).
        icc = im.info.get("icc_profile") if im.mode in ("RGB", "RGBA", "L", "LA", "P") else None
        try:
            im.load()
            upright = ImageOps.exif_transpose(im)
        except Exception:  # noqa: BLE001 - truncated, corrupt, bombs inside chunks ...
            raise _unsupported("it could not be decoded") from None
    pixels = _fresh(upright, source_format)
    limit = min(max_bytes, LEXICON_MAX_BYTES)
    out = _encode(pixels, "PNG" if source_format == "PNG" else "JPEG", icc)
    if len(out) > limit and pixels.mode in ("RGB", "L"):
        out = _encode(pixels, "JPEG", icc)  # an opaque PNG photo: JPEG is far smaller
        source_format = "JPEG"
    if len(out) > limit:
        raise ApiError(413, "payload_too_large",
                       f"Re-encoded, the image is {len(out)} bytes, more than {limit}; "
                       "upload a smaller image.")
    mime = "image/png" if source_format == "PNG" and out.startswith(PNG_MAGIC) else "image/jpeg"
    return CleanImage(out, mime, pixels.width, pixels.height)


def _fresh(im: Image.Image, source_format: str | None) -> Image.Image:
    """The pixels of `im` in a new image with no `info` (EXIF, XMP, text, comments, DPI),
    in a mode the output format can carry."""
    if im.mode in ("I;16", "I;16B", "I;16L", "I", "F"):
        im = _to_8bit(im)
    if source_format == "PNG":
        has_alpha = im.mode in ("RGBA", "LA", "PA") or "transparency" in im.info
        target = "RGBA" if has_alpha else ("L" if im.mode in ("1", "L") else "RGB")
    else:
        target = "L" if im.mode == "L" else "RGB"
    pixels = im.convert(target) if im.mode != target else im.copy()
    pixels.info = {}
    return pixels


def _to_8bit(im: Image.Image) -> Image.Image:
    """A 16-bit or float greyscale image scaled to 8 bits (a plain convert("L") clips every
    value above 255 to white)."""
    low, high = im.getextrema()
    if high <= low:
        return Image.new("L", im.size, 0 if high <= 0 else 255)
    scale = 255.0 / (high - low)
    return im.convert("F").point(lambda v: (v - low) * scale).convert("L")


def _encode(im: Image.Image, fmt: str, icc: bytes | None) -> bytes:
    buf = io.BytesIO()
    extra = {"icc_profile": icc} if icc else {}
    if fmt == "JPEG":
        im = im.convert("RGB") if im.mode not in ("RGB", "L") else im
        im.save(buf, "JPEG", quality=JPEG_QUALITY, optimize=True, **extra)
    else:
        im.save(buf, "PNG", optimize=True, **extra)
    return buf.getvalue()
