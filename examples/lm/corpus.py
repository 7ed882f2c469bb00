"""The language model example's two corpora, from text that Debian ships.

    /usr/bin/python3 examples/lm/corpus.py OUT

writes OUT/pretrain/{train,test}.tokens and OUT/finetune/{train,test}.tokens,
byte-level token files (docs/models.md: "Token files"; each byte of UTF-8
text is a token, a vocabulary of 256):

- pre-training: the fortune cookies of Debian's `fortunes` package
  (/usr/share/games/fortunes; BSD licence, its copyright file says), about
  2.6 MB of quotations, jokes and verse: one in 20 fortunes is held out as
  the test text;
- fine-tuning: the licence texts of Debian's `base-files` package
  (/usr/share/common-licenses: the GPL, LGPL, GFDL, Apache, Artistic, MPL,
  BSD and CC0 texts, about 260 KB, verbatim copying permitted): one in 10
  paragraphs is held out.

The two read differently (short witty English against long legal English),
so fine-tuning shows: the pre-trained model's loss on licence text falls as
it learns the style. Nothing is downloaded: `scripts/setup.sh` installs
`fortunes` with the project's other packages. --pretrain DIR and
--finetune DIR take other directories of text files (on macOS, Homebrew's
`fortune` keeps them in $(brew --prefix)/share/games/fortunes).
"""
import argparse
import os
import struct
import sys


def token_file(path, text):
    """Writes `text` (bytes) as a token file of byte tokens."""
    with open(path, "wb") as f:
        f.write(struct.pack("<7sBIIQ", b"CLAWTOK", 1, 1, 256, len(text)))
        f.write(text)


def text_files(directory):
    """The text files of a directory, sorted, each once (symbolic links to
    another file of it are skipped; fortune's .dat indexes are not text)."""
    seen, out = set(), []
    for name in sorted(os.listdir(directory)):
        path = os.path.join(directory, name)
        real = os.path.realpath(path)
        if not os.path.isfile(real) or name.endswith((".dat", ".u8")) or real in seen:
            continue
        seen.add(real)
        out.append(path)
    return out


def split(pieces, every):
    """(train, test): every `every`-th piece is held out."""
    train = b"".join(p for i, p in enumerate(pieces) if i % every != every - 1)
    test = b"".join(p for i, p in enumerate(pieces) if i % every == every - 1)
    return train, test


def fortunes(directory):
    pieces = []
    for path in text_files(directory):
        text = open(path, "rb").read()
        for f in text.split(b"\n%\n"):
            f = f.strip(b"%\n")
            if f:
                pieces.append(f + b"\n\n")
    return pieces


def licences(directory):
    pieces = []
    for path in text_files(directory):
        for para in open(path, "rb").read().split(b"\n\n"):
            if para.strip():
                pieces.append(para.strip(b"\n") + b"\n\n")
    return pieces


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("out")
    ap.add_argument("--pretrain", default="/usr/share/games/fortunes")
    ap.add_argument("--finetune", default="/usr/share/common-licenses")
    a = ap.parse_args()
    for what, directory, read, every in (("pretrain", a.pretrain, fortunes, 20),
                                         ("finetune", a.finetune, licences, 10)):
        if not os.path.isdir(directory):
            sys.exit(f"corpus.py: {directory} is not there (Debian: apt-get install fortunes base-files)")
        train, test = split(read(directory), every)
        os.makedirs(os.path.join(a.out, what), exist_ok=True)
        token_file(os.path.join(a.out, what, "train.tokens"), train)
        token_file(os.path.join(a.out, what, "test.tokens"), test)
        print(f"{what}: {len(train):,} training and {len(test):,} test tokens from {directory}")


if __name__ == "__main__":
    main()
