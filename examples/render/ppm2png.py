"""Converts each PPM (P6) in the working directory to a PNG, then removes it.

POV-Ray stamps the render date into its own PNG and PPM files, so two
renders of the same frame would never match byte for byte; this PNG holds
the pixels and nothing else, so identical pixels make identical files and
replicas of a frame can be compared by hash.
"""
import glob
import os
import struct
import zlib


def chunk(kind, data):
    return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))


def read_ppm(data):
    fields, pos = [], 0
    while len(fields) < 4:  # magic, width, height, maxval; comments skipped
        while data[pos:pos + 1].isspace():
            pos += 1
        if data[pos:pos + 1] == b"#":
            pos = data.index(b"\n", pos) + 1
            continue
        end = pos
        while not data[end:end + 1].isspace():
            end += 1
        fields.append(data[pos:end])
        pos = end
    if fields[0] != b"P6" or fields[3] != b"255":
        raise ValueError("not an 8-bit binary PPM")
    return int(fields[1]), int(fields[2]), data[pos + 1:]


for path in sorted(glob.glob("*.ppm")):
    with open(path, "rb") as f:
        width, height, pixels = read_ppm(f.read())
    stride = width * 3
    rows = b"".join(b"\x00" + pixels[y * stride:(y + 1) * stride] for y in range(height))
    png = (b"\x89PNG\r\n\x1a\n"
           + chunk(b"IHDR", struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0))
           + chunk(b"IDAT", zlib.compress(rows, 9))
           + chunk(b"IEND", b""))
    with open(path[:-4] + ".png", "wb") as f:
        f.write(png)
    os.remove(path)
