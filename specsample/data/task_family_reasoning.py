"""Logic and commonsense problems of the "reasoning" task family (`task_families`):
orderings, syllogisms, days of the week, counting, classic riddles with new fillers, family
relations, if-then rules, odd one out, analogies, seating, clocks and everyday situations.

Templates are (draw, answer key, phrasing) as in `task_family_math`; the answer is a name,
a word, a number or "" for open questions. Template i is the source "reasoning:i": new
templates go at the END of REASONING_TEMPLATES.
"""

from __future__ import annotations

import random

from specsample.data import task_family_words as words
from specsample.data.task_family_math import Template, Values, listing, ordinal, people

_ALL_NAMES = words.FEMALE_NAMES + words.MALE_NAMES
_COUNT_WORDS = ("zero", "one", "two", "three", "four", "five", "six")


def _article(noun: str) -> str:
  return ("an " if noun[0] in "aeiou" else "a ") + noun


def _ordering(rng: random.Random) -> Values:
  """People ranked by one quality, told by shuffled comparisons of neighbours."""
  more, less, most, least = rng.choice(words.COMPARATIVES)
  ranked = rng.sample(_ALL_NAMES, rng.randint(3, 5))  # the most first
  facts = [f"{a} is {more} than {b}." if rng.random() < 0.5 else f"{b} is {less} than {a}."
           for a, b in zip(ranked, ranked[1:], strict=False)]  # fmt: skip
  rng.shuffle(facts)
  i, j = sorted(rng.sample(range(len(ranked)), 2))
  first, second = (ranked[i], ranked[j]) if rng.random() < 0.5 else (ranked[j], ranked[i])
  return {"facts": " ".join(facts), "more": more, "most": most, "least": least,
          "top": ranked[0], "bottom": ranked[-1], "order": ", ".join(ranked), "first": first,
          "second": second, "is_more": "yes" if first == ranked[i] else "no"}  # fmt: skip


def _made_up_noun(rng: random.Random) -> str:
  return "".join(rng.sample(words.SYLLABLES, 2))


def _syllogism(rng: random.Random) -> Values:
  """Kinds a < b < c (real or made-up nouns) and an unrelated kind d."""
  if rng.random() < 0.4:
    a, b, c = rng.choice(words.CATEGORY_CHAINS)
  else:
    a, b, c = (_made_up_noun(rng) for _ in range(3))
  d = _made_up_noun(rng)
  return {"individual": rng.choice(words.PET_NAMES), "a": a, "b": b, "d": d, "as": a + "s",
          "bs": b + "s", "cs": c + "s", "ds": d + "s", "an_a": _article(a), "an_b": _article(b),
          "an_d": _article(d), "yes": "yes", "no": "no", "maybe": "not necessarily"}  # fmt: skip


def _days(rng: random.Random) -> Values:
  day, n, date = rng.randrange(7), rng.randint(2, 100), rng.randint(2, 28)
  return {"day": words.WEEKDAYS[day], "n": n, "later": words.WEEKDAYS[(day + n) % 7],
          "ago": words.WEEKDAYS[(day - n) % 7], "after_tomorrow": words.WEEKDAYS[(day + 4) % 7],
          "month": rng.choice(words.MONTHS), "date": date,
          "dated": words.WEEKDAYS[(day + date - 1) % 7]}  # fmt: skip


def _counting(rng: random.Random) -> Values:
  word = rng.choice(words.WORDS_TO_SPELL)
  letter = rng.choice(sorted(set(word)))
  brothers, sisters = rng.randint(2, 6), rng.randint(2, 6)
  front, back, crowd = rng.randint(2, 30), rng.randint(2, 30), rng.randint(3, 25)
  cows, chickens = rng.randint(1, 30), rng.randint(1, 30)
  gap, spans = rng.randint(2, 10), rng.randint(3, 30)
  return {**people(rng), "word": word, "letter": letter, "letters": word.count(letter),
          "girl": rng.choice(words.FEMALE_NAMES), "brothers": brothers, "sisters": sisters,
          "sisters_of_brother": sisters + 1, "front": ordinal(front), "back": ordinal(back),
          "line": front + back - 1, "heads": cows + chickens, "legs": 4 * cows + 2 * chickens,
          "cows": cows, "crowd": crowd, "handshakes": crowd * (crowd - 1) // 2,
          "fence": gap * spans, "gap": gap, "posts": spans + 1}  # fmt: skip


def _riddles(rng: random.Random) -> Values:
  (item, items), (item2, _) = rng.sample(words.SHOP_ITEMS, 2)
  machines, more_machines = rng.randint(2, 12), rng.randint(20, 200)
  cheaper, difference = rng.randint(1, 50), rng.randint(1, 100)
  up = rng.randint(3, 8)
  down, depth = rng.randint(1, up - 1), rng.randint(up + 1, 40)
  others = rng.sample(_ALL_NAMES, rng.randint(2, 4))
  girl = rng.choice([n for n in words.FEMALE_NAMES if n not in others])
  return {"machines": machines, "more_machines": more_machines, "items": items, "item": item,
          "item2": item2, "total": 2 * cheaper + difference, "difference": difference,
          "cheaper": cheaper, "depth": depth, "up": up, "down": down,
          "day": -(-(depth - up) // (up - down)) + 1, "light": rng.choice(words.LIGHT_THINGS),
          "heavy": rng.choice(words.HEAVY_THINGS), "same": "neither: they weigh the same",
          "girl": girl, "children": len(others) + 1, "others": listing(others),
          "others_count": _COUNT_WORDS[len(others)].capitalize(),
          "place": ordinal(rng.randint(2, 10))}  # fmt: skip


def _family(rng: random.Random) -> Values:
  man, man2, boy = rng.sample(words.MALE_NAMES, 3)
  woman, woman2, girl = rng.sample(words.FEMALE_NAMES, 3)
  child = rng.choice((boy, girl))
  return {"man": man, "man2": man2, "boy": boy, "woman": woman, "woman2": woman2, "girl": girl,
          "child": child, "grandfather": "grandfather", "uncle": "uncle", "cousins": "cousins",
          "son": f"{man}'s son"}  # fmt: skip


def _rules(rng: random.Random) -> Values:
  condition, consequence, denied = rng.choice(words.RULES)
  return {"condition": condition, "consequence": consequence, "denied": denied,
          "ponens": consequence, "tollens": f"it is not so that {condition}",
          "converse": "no"}  # fmt: skip


def _categories(rng: random.Random) -> Values:
  kind, other = rng.sample(sorted(words.CATEGORY_WORDS), 2)
  three, odd = rng.sample(words.CATEGORY_WORDS[kind], 3), rng.choice(words.CATEGORY_WORDS[other])
  shown, six = [*three, odd], three + rng.sample(words.CATEGORY_WORDS[other], 3)
  rng.shuffle(shown)
  rng.shuffle(six)
  return {"four": ", ".join(shown), "odd": odd, "six": ", ".join(six), "three": listing(three),
          "kind": kind, "kinds": f"{kind} and {other}"}  # fmt: skip


def _analogy(rng: random.Random) -> Values:
  (a, b), (c, d) = rng.sample(rng.choice(words.ANALOGY_GROUPS), 2)
  return {"a": a, "b": b, "c": c, "d": d}


def _seating(rng: random.Random) -> Values:
  row = rng.sample(_ALL_NAMES, rng.randint(3, 5))  # left to right
  facts = [f"{a} sits directly to the left of {b}." if rng.random() < 0.5
           else f"{b} sits directly to the right of {a}."
           for a, b in zip(row, row[1:], strict=False)]  # fmt: skip
  rng.shuffle(facts)
  seat = rng.randrange(len(row) - 1)
  return {"count": _COUNT_WORDS[len(row)].capitalize(), "facts": " ".join(facts),
          "right_end": row[-1], "someone": row[seat], "neighbour": row[seat + 1]}  # fmt: skip


def _clock(rng: random.Random) -> Values:
  hour, hours = rng.randint(1, 12), rng.randint(1, 100)
  return {"hour": hour, "hours": hours, "later": (hour - 1 + hours) % 12 + 1,
          "angle": min(30 * hour, 360 - 30 * hour) % 360}  # fmt: skip


def _situation(rng: random.Random) -> Values:
  person = people(rng)
  return {**person, "situation": rng.choice(words.SITUATIONS).format(**person), "open": ""}


# fmt: off
REASONING_TEMPLATES: tuple[Template, ...] = (
  (_ordering, "top", "{facts} Who is the {most}?"),
  (_ordering, "bottom", "{facts} Who is the {least}? Explain your reasoning."),
  (_ordering, "order", "{facts} List everyone from the {most} to the {least}."),
  (_ordering, "is_more", "{facts} Is {first} {more} than {second}? Explain step by step."),
  (_syllogism, "yes", "All {as} are {bs}, and all {bs} are {cs}. Are all {as} {cs}? Explain."),
  (_syllogism, "no",
   "All {as} are {bs}. Some {bs} are {ds}. Does it follow that some {as} are {ds}? Explain."),
  (_syllogism, "yes", "{individual} is {an_a}. Every {a} is {an_b}. Is {individual} {an_b}?"),
  (_syllogism, "no", "No {bs} are {ds}. All {as} are {bs}. Can any {a} be {an_d}?"),
  (_syllogism, "maybe",
   "All {as} are {bs}. {individual} is {an_b}. Must {individual} be {an_a}? Explain."),
  (_days, "later", "If today is {day}, what day of the week will it be in {n} days?"),
  (_days, "ago", "If today is {day}, what day of the week was it {n} days ago?"),
  (_days, "after_tomorrow",
   "If the day before yesterday was {day}, what day is the day after tomorrow?"),
  (_days, "dated",
   "{month} 1 is a {day}. What day of the week is {month} {date} of the same year?"),
  (_counting, "letters", "How many times does the letter '{letter}' appear in the word '{word}'?"),
  (_counting, "sisters_of_brother",
   "{girl} has {brothers} brothers and {sisters} sisters. How many sisters does each of her "
   "brothers have?"),
  (_counting, "line",
   "In a queue, {name} is {front} from the front and {back} from the back. How many people are "
   "in the queue?"),
  (_counting, "cows",
   "A farm has only chickens and cows: {heads} heads and {legs} legs in all. How many cows are "
   "there?"),
  (_counting, "handshakes",
   "At a meeting of {crowd} people, everyone shakes hands with everyone else exactly once. How "
   "many handshakes are there?"),
  (_counting, "posts",
   "A straight fence is {fence} metres long, with a post every {gap} metres, including both "
   "ends. How many posts are there?"),
  (_riddles, "machines",
   "If {machines} machines take {machines} minutes to make {machines} {items}, how long would "
   "{more_machines} machines take to make {more_machines} {items}?"),
  (_riddles, "cheaper",
   "A {item} and a {item2} cost ${total} together. The {item} costs ${difference} more than the "
   "{item2}. How much does the {item2} cost?"),
  (_riddles, "day",
   "A snail is at the bottom of a well {depth} metres deep. Each day it climbs {up} metres, and "
   "each night it slips back {down} metres. On which day does it reach the top?"),
  (_riddles, "same", "Which is heavier: a kilogram of {light} or a kilogram of {heavy}?"),
  (_riddles, "girl",
   "{girl}'s mother has {children} children. {others_count} of them are called {others}. What is "
   "the name of the other child?"),
  (_riddles, "place",
   "In a race, you overtake the runner in {place} place. What place are you in now?"),
  (_family, "grandfather",
   "{man} is the father of {woman}, and {woman} is the mother of {child}. What is {man} to "
   "{child}?"),
  (_family, "uncle",
   "{man} and {woman} are brother and sister. {woman} has a son named {boy}. What is {man} to "
   "{boy}?"),
  (_family, "cousins",
   "{woman} and {woman2} are sisters. {boy} is {woman}'s son, and {girl} is {woman2}'s daughter. "
   "How are {boy} and {girl} related?"),
  (_family, "son",
   "{man} has no brothers or sisters. Pointing at a photo, he says: \"This man's father is my "
   "father's son.\" Who is in the photo?"),
  (_rules, "ponens",
   "Rule: if {condition}, then {consequence}. Fact: {condition}. What can you conclude?"),
  (_rules, "tollens",
   "Rule: if {condition}, then {consequence}. Fact: {denied}. What can you conclude, and why?"),
  (_rules, "converse",
   "Rule: if {condition}, then {consequence}. Fact: {consequence}. Can you conclude that "
   "{condition}? Explain."),
  (_categories, "odd", "Which word does not belong: {four}? Explain why."),
  (_categories, "kinds", "Sort these words into two groups and name each group: {six}."),
  (_categories, "kind", "What do {three} have in common?"),
  (_analogy, "d", "{a} is to {b} as {c} is to what?"),
  (_analogy, "d", "Complete the analogy: {a} : {b} :: {c} : ?"),
  (_seating, "right_end", "{count} friends sit in a row. {facts} Who sits at the right end?"),
  (_seating, "neighbour",
   "{count} friends sit in a row. {facts} Who sits directly to the right of {someone}?"),
  (_clock, "later",
   "It is {hour} o'clock now. What time will a 12-hour clock show in {hours} hours?"),
  (_clock, "angle",
   "What is the smaller angle between the hands of a clock at exactly {hour} o'clock?"),
  (_situation, "open", "{situation} What will most likely happen next?"),
  (_situation, "open", "{situation} What should {they} do now, and why?"),
  (_situation, "open", "{situation} Why might this be a problem?"),
)
# fmt: on
