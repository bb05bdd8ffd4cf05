"""The docstring-summarization dataset built from Python sources with `ast`."""

from __future__ import annotations

import textwrap

from specsample.data import docstrings


def write(path, text):
  path.parent.mkdir(parents=True, exist_ok=True)
  path.write_text(textwrap.dedent(text))


def test_first_sentence_takes_the_first_sentence_of_the_first_paragraph():
  assert docstrings.first_sentence("Return the path.  It is absolute.") == "Return the path."
  assert (
    docstrings.first_sentence("Open the file\n   named by path.\n\nMore text.")
    == "Open the file named by path."
  )
  # Too short, doctest-like or not starting with a letter: not a usable target.
  assert docstrings.first_sentence("Helper.") is None
  assert docstrings.first_sentence(">>> f(1) is here") is None
  assert docstrings.first_sentence(":param x: the thing") is None


def test_examples_strip_the_docstring_and_skip_test_directories(tmp_path):
  write(
    tmp_path / "pkg" / "mod.py",
    '''
    def area(width, height):
        """Return the area of a rectangle.

        Longer explanation.
        """
        return width * height

    class Box:
        """A box that holds things in order."""
        def put(self, item):
            """Put an item into the box."""
            self.items.append(item)

    def undocumented():
        return 1
    ''',
  )
  write(tmp_path / "pkg" / "tests" / "test_mod.py", 'def test_x():\n    """Check the x value."""\n')
  write(tmp_path / "broken.py", "def (:\n")
  splits = docstrings.build_examples(str(tmp_path))
  examples = sorted((e for split in splits.values() for e in split), key=lambda e: e.name)
  assert [(e.module, e.name, e.docstring) for e in examples] == [
    ("pkg/mod.py", "Box", "A box that holds things in order."),
    ("pkg/mod.py", "Box.put", "Put an item into the box."),
    ("pkg/mod.py", "area", "Return the area of a rectangle."),
  ]
  area = examples[2]
  assert area.code == "def area(width, height): return width * height"
  assert "Return the area" not in area.code
  # The class's code holds its methods, without any docstring.
  assert examples[0].code == "class Box: def put(self, item): self.items.append(item)"


def test_split_is_a_function_of_the_target_and_roughly_proportional():
  texts = [f"Return item number {i} of the list." for i in range(5000)]
  splits = [docstrings.split_of(t) for t in texts]
  assert splits == [docstrings.split_of(t) for t in texts]
  assert 50 < splits.count("test") < 150 and 50 < splits.count("validation") < 150


def test_jsonl_round_trip(tmp_path):
  example = docstrings.Example("def f(): pass", "Do nothing at all.", "m.py", "f")
  path = str(tmp_path / "x.jsonl")
  assert docstrings.write_jsonl([example, example], path) == 2
  assert docstrings.read_jsonl(path) == [example, example]


def test_the_standard_library_gives_thousands_of_examples():
  splits = docstrings.build_examples()
  assert len(splits["train"]) > 5000
  assert 50 < len(splits["test"]) < 500
  tests = {e.docstring for e in splits["test"]}
  assert not tests & {e.docstring for e in splits["train"]}
