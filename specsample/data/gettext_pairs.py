"""English -> German sentence pairs from the gettext catalogs a Debian system ships.

`/usr/share/locale/de/LC_MESSAGES/*.mo` holds ~72,000 human translations of program
messages. `build_pairs` reads them (polib; catalogs that are not UTF-8 fall back to
Latin-1), cleans them and splits them deterministically:

- accelerator marks (`_File`, `&Open`) are removed;
- printf-style (`%s`, `%d`, `%5.2f`, `%1$s`, `%(name)s`) placeholders become `%s` (`%%`
  becomes `%`) and
  brace placeholders (`{0}`, `{name}`) become `{0}`; a pair whose two sides do not carry
  the same placeholders is dropped;
- whitespace is collapsed; multi-line, very long, letter-free and untranslated entries
  are dropped; the first translation of each English text (catalogs in name order) wins;
- the split is by a hash of the English text: ~1% test, ~1% validation, the rest train.
"""

from __future__ import annotations

import collections
import dataclasses
import glob
import hashlib
import os
import re
from collections.abc import Iterable, Iterator

from specsample.files import replacing

DEFAULT_CATALOG_DIR = "/usr/share/locale/de/LC_MESSAGES"
MAX_CHARACTERS = 150
SPLITS = ("train", "validation", "test")

_PRINTF = re.compile(
  r"%(?:\d+\$)?"  # positional: %1$s
  r"(?:\([A-Za-z_][A-Za-z0-9_]*\))?"  # python mapping key: %(name)s
  r"[-+ #0']*\d*(?:\.\d+)?"  # flags, width, precision
  r"(?:hh|h|ll|l|L|q|j|z|t)?[diouxXeEfFgGaAcspn]"  # length modifier, conversion
)
_BRACE = re.compile(r"\{[A-Za-z0-9_]*\}")
_ACCELERATOR = re.compile(r"(?<![A-Za-z0-9_&])[_&](?=[^\W\d_])")
_LETTER = re.compile(r"[^\W\d_]")


@dataclasses.dataclass(frozen=True)
class Pair:
  english: str
  german: str
  catalog: str  # file name the pair came from, e.g. "coreutils.mo"


def clean_message(text: str) -> str | None:
  """One side of a pair, cleaned; None when the text is not usable."""
  if "\n" in text.strip() or "\t" in text:
    return None
  text = _ACCELERATOR.sub("", text)
  literal_percent = "\x00"  # "%%" is a literal percent sign, not a placeholder
  text = _PRINTF.sub("%s", text.replace("%%", literal_percent)).replace(literal_percent, "%")
  text = _BRACE.sub("{0}", text)
  text = " ".join(text.split())
  words = text.replace("%s", "").replace("{0}", "")
  if not text or len(text) > MAX_CHARACTERS or not _LETTER.search(words):
    return None
  return text


def _placeholders(text: str) -> collections.Counter:
  return collections.Counter(re.findall(r"%s|\{0\}", text))


def clean_pair(english: str, german: str) -> tuple[str, str] | None:
  """Both sides cleaned, or None if the pair should not be used."""
  english, german = clean_message(english), clean_message(german)
  if english is None or german is None or english == german:
    return None
  if _placeholders(english) != _placeholders(german):
    return None
  return english, german


def read_catalog(path: str) -> Iterator[tuple[str, str]]:
  """(msgid, msgstr) of the translated singular entries of one .mo file."""
  import polib

  try:
    catalog = polib.mofile(path)
  except UnicodeDecodeError:
    catalog = polib.mofile(path, encoding="latin-1")
  for entry in catalog:
    german = entry.msgstr_plural.get(0, "") if entry.msgid_plural else entry.msgstr
    if entry.msgid and german and not entry.obsolete and "fuzzy" not in entry.flags:
      yield entry.msgid, german


def split_of(english: str) -> str:
  """Deterministic split from the text alone: 1% test, 1% validation, 98% train."""
  bucket = int(hashlib.sha256(english.encode("utf-8")).hexdigest()[:8], 16) % 100
  return "test" if bucket == 0 else "validation" if bucket == 1 else "train"


def build_pairs(catalog_dir: str = DEFAULT_CATALOG_DIR) -> dict[str, list[Pair]]:
  """All cleaned, de-duplicated pairs of a catalog directory, by split."""
  paths = sorted(glob.glob(os.path.join(catalog_dir, "*.mo")))
  if not paths:
    raise FileNotFoundError(f"no .mo catalogs in {catalog_dir}")
  seen: set[str] = set()
  splits: dict[str, list[Pair]] = {name: [] for name in SPLITS}
  for path in paths:
    for english, german in read_catalog(path):
      cleaned = clean_pair(english, german)
      if cleaned is None or cleaned[0] in seen:
        continue
      seen.add(cleaned[0])
      splits[split_of(cleaned[0])].append(Pair(*cleaned, os.path.basename(path)))
  return splits


def write_tsv(pairs: Iterable[Pair], path: str) -> int:
  """english<TAB>german lines; returns the number written."""
  count = 0
  with replacing(path) as temporary, open(temporary, "w", encoding="utf-8") as f:
    for pair in pairs:
      f.write(f"{pair.english}\t{pair.german}\n")
      count += 1
  return count


def read_tsv(path: str) -> list[tuple[str, str]]:
  with open(path, encoding="utf-8") as f:
    return [tuple(line.rstrip("\n").split("\t", 1)) for line in f if line.strip()]
