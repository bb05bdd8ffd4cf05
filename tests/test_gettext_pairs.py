"""The English->German dataset builder, on catalogs made here (UTF-8 and Latin-1)."""

from __future__ import annotations

import polib
import pytest

from specsample.data.gettext_pairs import (
  build_pairs,
  clean_message,
  clean_pair,
  read_tsv,
  split_of,
  write_tsv,
)


def make_catalog(path, entries, encoding="utf-8"):
  catalog = polib.POFile(encoding=encoding)
  catalog.metadata = {"Content-Type": f"text/plain; charset={encoding}"}
  for entry in entries:
    catalog.append(entry)
  catalog.save_as_mofile(str(path))


def test_cleaning_rules():
  assert clean_message("Could not open file %s") == "Could not open file %s"
  assert clean_message("%1$s of %(total)d (%5.2f%%)") == "%s of %s (%s%)"
  assert clean_message("Value {0} for {name}") == "Value {0} for {0}"
  assert clean_message("_Open   the &File") == "Open the File"
  assert clean_message("snake_case and A&&B stay") == "snake_case and A&&B stay"
  assert clean_message("two\nlines") is None
  assert clean_message("x" * 200) is None
  assert clean_message("%s: %d") is None  # no letters
  assert clean_pair("Open %s", "Öffne %s") == ("Open %s", "Öffne %s")
  assert clean_pair("Open %s", "Öffnen") is None  # placeholders differ
  assert clean_pair("OK", "OK") is None  # untranslated


def test_build_pairs_reads_dedupes_and_splits(tmp_path):
  make_catalog(
    tmp_path / "a.mo",
    [
      polib.POEntry(msgid="_Open file %s", msgstr="Datei %s ö_ffnen"),
      polib.POEntry(msgid="Close", msgstr="Schließen"),
      polib.POEntry(
        msgid="%d file", msgid_plural="%d files", msgstr_plural={0: "%d Datei", 1: "%d Dateien"}
      ),
      polib.POEntry(msgid="Untranslated", msgstr=""),
      polib.POEntry(msgid="Fuzzy one", msgstr="Unscharf", flags=["fuzzy"]),
    ],
  )
  make_catalog(
    tmp_path / "b.mo",
    [
      polib.POEntry(msgid="Close", msgstr="Zumachen"),  # duplicate English: the first wins
      polib.POEntry(msgid="Größe", msgstr="Größe"),  # untranslated
      polib.POEntry(msgid="Size of file", msgstr="Dateigröße"),
    ],
    encoding="latin-1",
  )
  splits = build_pairs(str(tmp_path))
  pairs = {p.english: (p.german, p.catalog) for split in splits.values() for p in split}
  assert pairs == {
    "Open file %s": ("Datei %s öffnen", "a.mo"),
    "Close": ("Schließen", "a.mo"),
    "%s file": ("%s Datei", "a.mo"),
    "Size of file": ("Dateigröße", "b.mo"),
  }
  for split, members in splits.items():
    assert all(split_of(p.english) == split for p in members)
  assert build_pairs(str(tmp_path)) == splits  # deterministic
  write_tsv(splits["train"], tmp_path / "train.tsv")
  assert read_tsv(tmp_path / "train.tsv") == [(p.english, p.german) for p in splits["train"]]


def test_split_sizes_are_about_one_percent():
  names = [f"message number {i}" for i in range(20_000)]
  counts = {s: sum(split_of(n) == s for n in names) for s in ("train", "validation", "test")}
  assert 150 < counts["test"] < 250 and 150 < counts["validation"] < 250


def test_no_catalogs(tmp_path):
  with pytest.raises(FileNotFoundError):
    build_pairs(str(tmp_path))
