"""The command line's shared pieces: one-line errors, bounded integer arguments, a parser whose usage errors
are one line. ``lore.cli`` and the analysis command lines use them."""

from __future__ import annotations

import argparse
import sys

MAX_ERROR_CHARS = 4000


def one_line(message: object) -> str:
    """``message`` as one printable line: line breaks become spaces, other control characters escapes."""
    text = " ".join(part for part in str(message).splitlines() if part.strip())  # \n, \r, \u2028 ...
    text = "".join(ch if ch.isprintable() else ch.encode("unicode_escape").decode("ascii") for ch in text)
    return text if len(text) <= MAX_ERROR_CHARS else text[:MAX_ERROR_CHARS] + " ..."


def fail(message: object, status: int = 2) -> int:
    """Print ``message`` as the one ``lore: error:`` line (keys and URL secrets masked); returns ``status``."""
    from lore.llm.secrets import redact_text

    print(f"lore: error: {one_line(redact_text(str(message)))}", file=sys.stderr)
    return status


def bounded_int(lo: int, hi: int):
    """An argparse ``type``: an integer in ``[lo, hi]`` (written as digits, or as a whole number like ``1e3``),
    checked before anything uses it."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            try:
                number = float(text)
            except ValueError:
                raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
            if not number.is_integer():
                raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
            value = int(number)
        if not lo <= value <= hi:
            raise argparse.ArgumentTypeError(f"{text} is out of range: expected {lo}..{hi}")
        return value

    return parse


class OneLineParser(argparse.ArgumentParser):
    """Usage errors as the one-line ``lore: error: ...`` every other bad input gets (exit status 2)."""

    def error(self, message: str):
        sys.exit(fail(f"{self.prog}: {message} (see `{self.prog} --help`)"))
