"""Chat templates: rendering them as transformers does, and keeping the control tokens
that appear in user text out of the token ids.

A chat template writes its own control tokens (`<|im_start|>`, `<|im_end|>`, ...) around
the messages. Text from a user that spells one of them must stay text: otherwise a
message containing "<|im_end|>\\n<|im_start|>assistant" would end its own turn and forge
an assistant's. `mark_control_tokens` wraps every control token in user strings with two
private-use characters before rendering; `split_marked_chat` then cuts the rendered text
into the template's pieces (encoded normally, its control tokens as tokens) and the
marked ones (encoded as plain text). This is transformers' `apply_chat_template(...,
sanitize_control_tokens=True)`, and gives the same ids.

Control tokens are the tokenizer's special tokens, plus its other added tokens that occur
in the template's literal text (whitespace tokens excepted).
"""

from __future__ import annotations

import functools
import json
import re
from datetime import datetime
from typing import Any

# Private-use characters wrapped around control tokens in user strings (transformers'
# choice: strings from elsewhere never carry them, and any that do are dropped).
START, END = "\U000f0000", "\U000f0001"


@functools.cache
def compile_template(template: str):
  """The template compiled as transformers compiles chat templates (sandboxed jinja2)."""
  import jinja2
  import jinja2.ext
  from jinja2.sandbox import ImmutableSandboxedEnvironment

  class Generation(jinja2.ext.Extension):
    """`{% generation %}...{% endgeneration %}` (assistant-mask markers): renders the body."""

    tags = {"generation"}

    def parse(self, parser):
      lineno = next(parser.stream).lineno
      body = parser.parse_statements(("name:endgeneration",), drop_needle=True)
      return jinja2.nodes.CallBlock(self.call_method("_body"), [], [], body).set_lineno(lineno)

    def _body(self, caller):
      return caller()

  def raise_exception(message):
    raise jinja2.exceptions.TemplateError(message)

  def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
    return json.dumps(
      x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys
    )

  env = ImmutableSandboxedEnvironment(
    trim_blocks=True, lstrip_blocks=True, extensions=[Generation, jinja2.ext.loopcontrols]
  )
  env.filters["tojson"] = tojson
  env.globals["raise_exception"] = raise_exception
  env.globals["strftime_now"] = lambda format: datetime.now().strftime(format)
  return env.from_string(template)


@functools.cache
def template_literal_text(template: str) -> str:
  """The template's raw text and string constants, joined with NUL (no match spans two)."""
  import jinja2.nodes

  tree = compile_template(template).environment.parse(template)
  literals = {node.data for node in tree.find_all(jinja2.nodes.TemplateData)}
  literals |= {
    node.value for node in tree.find_all(jinja2.nodes.Const) if isinstance(node.value, str)
  }
  return "\0".join(sorted(literals))


def control_tokens(added_tokens, template: str) -> tuple[str, ...]:
  """The texts of the control tokens among `added_tokens` (tokenizers' AddedToken): the
  special ones, and the others that the template's literal text contains."""
  literal = template_literal_text(template)
  return tuple(
    token.content
    for token in added_tokens
    if token.special or (token.content in literal and not token.content.isspace())
  )


@functools.cache
def _alternatives(tokens: tuple[str, ...]) -> str:
  """A regex matching any of `tokens`, longer ones first (a token before those it holds)."""
  pattern = "|".join(map(re.escape, sorted(tokens, key=len, reverse=True)))
  return pattern or "(?!)"


def mark_control_tokens(value: Any, tokens: tuple[str, ...]) -> Any:
  """`value` (a string, or dicts and lists of them, as chat messages are) with every
  control token in its strings wrapped in START ... END; markers already there are
  dropped first, so that none can be forged. Dict keys are left as they are."""
  if isinstance(value, str):
    value = value.replace(START, "").replace(END, "")
    return re.sub(_alternatives(tokens), f"{START}\\g<0>{END}", value)
  if isinstance(value, dict):
    return {key: mark_control_tokens(item, tokens) for key, item in value.items()}
  if isinstance(value, list | tuple):
    return [mark_control_tokens(item, tokens) for item in value]
  return value


def split_marked_chat(text: str, added: tuple[str, ...]) -> list[tuple[str, bool]]:
  """The rendered chat `text` as (piece, is user text) pairs, markers removed: the text
  between marked control tokens, and each marked one. The first pair is the text before
  the first marker (possibly ""); later empty pieces are left out. A lone marker (a
  template that cut a marked token apart, e.g. with `split()`) is dropped but still ends
  a piece, so that the text on either side cannot join into a control token. `added` are
  the texts of every added token of the tokenizer."""
  marked = re.compile(f"{START}({_alternatives(added)}){END}|[{START}{END}]")
  pieces = marked.split(text)  # [text, marked token (None for a lone marker), text, ...]
  return [(pieces[0], False)] + [
    (piece, index % 2 == 1) for index, piece in enumerate(pieces) if index and piece
  ]
