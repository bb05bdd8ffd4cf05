"""Math word problems of the "math" task family (`task_families`): percentages, unit
conversions, ages, prices, rates, algebra, sequences, fractions, averages, ratios,
geometry, interest, time and arithmetic.

A template is (draw, answer key, phrasing): `draw(rng)` returns the slot values of one
problem (random numbers, names and objects) with the computed answers among them; the
phrasing is filled with `str.format` and `values[answer key]` is the exact answer (an int,
or a Fraction for fraction problems; kept for checks, never shown in the prompt). Every
number a problem shows is a whole number from 0 to 1,000,000. Template i is the source
"math:i", so new templates go at the END of MATH_TEMPLATES (the others keep their number and
split).
"""

from __future__ import annotations

import random
from collections.abc import Callable
from fractions import Fraction

from specsample.data import task_family_words as words

Values = dict[str, object]
Template = tuple[Callable[[random.Random], Values], str, str]


def people(rng: random.Random, count: int = 1) -> Values:
  """Slot values of `count` different people: {name}, {they}, {They}, {their} for the first,
  {name2}, {they2}, ... for the second, and so on."""
  values: Values = {}
  taken: set[str] = set()
  for i in range(count):
    suffix = str(i + 1) if i else ""
    female = rng.random() < 0.5
    name = rng.choice([n for n in (words.FEMALE_NAMES if female else words.MALE_NAMES)
                       if n not in taken])  # fmt: skip
    taken.add(name)
    pronoun = "she" if female else "he"
    values |= {"name" + suffix: name, "they" + suffix: pronoun,
               "They" + suffix: pronoun.capitalize(),
               "their" + suffix: "her" if female else "his"}  # fmt: skip
  return values


def ordinal(number: int) -> str:
  """1 -> "1st", 12 -> "12th", 22 -> "22nd"."""
  suffix = "th" if 10 <= number % 100 <= 20 else {1: "st", 2: "nd", 3: "rd"}.get(number % 10, "th")
  return f"{number}{suffix}"


def listing(things: list) -> str:
  """[a, b, c] -> "a, b and c"."""
  things = [str(t) for t in things]
  return things[0] if len(things) == 1 else ", ".join(things[:-1]) + " and " + things[-1]


def _percent(rng: random.Random) -> Values:
  percent = rng.choice((5, 10, 15, 20, 25, 30, 40, 50, 60, 75, 80))
  whole = 20 * rng.randint(2, 50)  # percent * whole / 100 is whole
  part = percent * whole // 100
  return {**people(rng), "item": rng.choice(words.BIG_ITEMS), "percent": percent,
          "whole": whole, "part": part, "sale": whole - part, "raised": whole + part}  # fmt: skip


def _conversion(rng: random.Random) -> Values:
  big, small, factor = rng.choice(words.UNIT_CONVERSIONS)
  n = rng.randint(2, 40)
  return {"big": big, "small": small, "n": n, "small_amount": n * factor}


def _ages(rng: random.Random) -> Values:
  young, gap, later = rng.randint(4, 30), rng.randint(2, 30), rng.randint(2, 20)
  times = rng.randint(2, 5)
  ago, born, age_then = rng.randint(2, young - 1), rng.randint(1950, 2015), rng.randint(5, 60)
  return {**people(rng, 2), "young": young, "gap": gap, "later": later,
          "sum_later": 2 * young + gap + 2 * later, "times": times,
          "old_later": times * young + later,
          "young_later": young + later, "ago": ago, "young_ago": young - ago, "born": born,
          "year": born + age_then, "age_then": age_then}  # fmt: skip


def _shopping(rng: random.Random) -> Values:
  (item, items), (item2, items2) = rng.sample(words.SHOP_ITEMS, 2)
  count, price = rng.randint(2, 12), rng.randint(1, 15)
  count2, price2 = rng.randint(2, 10), rng.randint(1, 12)
  cost, budget = count * price, rng.randint(price, 100)
  bill = next(b for b in (10, 20, 50, 100, 200) if b >= cost)
  return {**people(rng), "item": item, "items": items, "items2": items2, "count": count,
          "price": price, "cost": cost, "bill": bill, "change": bill - cost, "count2": count2,
          "price2": price2, "total": cost + count2 * price2, "budget": budget,
          "afford": budget // price}  # fmt: skip


# Two workers' hours that give a whole number of hours together (a*b / (a+b)).
_WORK_PAIRS = tuple((a, b) for a in range(2, 31) for b in range(2, 31) if a * b % (a + b) == 0)


def _rates(rng: random.Random) -> Values:
  speed, hours = 5 * rng.randint(4, 24), rng.randint(2, 9)
  rate, days = rng.randint(5, 60), rng.randint(3, 30)
  (time_a, time_b), litres = rng.choice(_WORK_PAIRS), rng.randint(2, 25)
  minutes = rng.randint(3, 40)
  return {**people(rng, 2), "vehicle": rng.choice(words.VEHICLES), "speed": speed, "hours": hours,
          "distance": speed * hours, "rate": rate, "days": days, "pages": rate * days,
          "time_a": time_a, "time_b": time_b, "together": time_a * time_b // (time_a + time_b),
          "litres": litres, "minutes": minutes, "volume": litres * minutes}  # fmt: skip


def _algebra(rng: random.Random) -> Values:
  x, a, b = rng.randint(2, 25), rng.randint(2, 12), rng.randint(1, 40)
  shift, y, less = rng.randint(1, x - 1), rng.randint(1, x - 1), rng.randint(1, a * x - 1)
  return {"x": x, "a": a, "b": b, "c": a * x + b, "less": less, "c_less": a * x - less,
          "shift": shift, "c_shift": a * (x - shift), "total": x + y,
          "difference": x - y}  # fmt: skip


def _sequences(rng: random.Random) -> Values:
  start, step, n = rng.randint(1, 30), rng.randint(2, 15), rng.randint(8, 30)
  first, ratio = rng.randint(1, 5), rng.randint(2, 4)
  terms, last = rng.randint(5, 20), rng.randint(10, 200)
  return {"arith": ", ".join(str(start + step * i) for i in range(4)),
                             "next_arith": start + 4 * step,
          "start": start, "step": step, "nth": ordinal(n), "nth_term": start + (n - 1) * step,
          "geo": ", ".join(str(first * ratio**i) for i in range(4)), "next_geo": first * ratio**4,
          "terms": terms, "arith_sum": terms * (2 * start + (terms - 1) * step) // 2, "last": last,
          "sum_to": last * (last + 1) // 2}  # fmt: skip


def _fractions(rng: random.Random) -> Values:
  b, d = rng.randint(2, 12), rng.randint(2, 12)
  a, c = rng.randint(1, b - 1), rng.randint(1, d - 1)
  if Fraction(a, b) < Fraction(c, d):  # the difference is never negative
    (a, b), (c, d) = (c, d), (a, b)
  k, multiple = rng.randint(1, 4), b * rng.randint(2, 15)
  return {**people(rng), "a": a, "b": b, "c": c, "d": d, "sum": Fraction(a, b) + Fraction(c, d),
          "difference": Fraction(a, b) - Fraction(c, d), "product": Fraction(a * c, b * d),
          "multiple": multiple, "of_multiple": a * multiple // b, "slices": b * k,
          "slices_left": (b - a) * k}  # fmt: skip


def _averages(rng: random.Random) -> Values:
  count, mean = rng.randint(3, 6), rng.randint(55, 90)
  while True:
    scores = [rng.randint(mean - 15, mean + 10) for _ in range(count - 1)]
    last = mean * count - sum(scores)
    if 0 <= last <= 100:
      break
  return {**people(rng), "scores": listing([*scores, last]), "mean": mean, "count": count,
          "first_scores": listing(scores), "tests": count - 1, "last": last}  # fmt: skip


def _ratios(rng: random.Random) -> Values:
  (ra, rb), k = rng.sample(range(1, 10), 2), rng.randint(2, 12)
  colour, colour2 = rng.sample(words.MARBLE_COLOURS, 2)
  first, second = rng.randint(1, 20), rng.randint(1, 20)
  return {**people(rng, 2), "ra": ra, "rb": rb, "total": (ra + rb) * k, "part_a": ra * k,
          "part_b": rb * k, "colour": colour, "colour2": colour2, "first": first,
          "second": second, "probability": Fraction(first, first + second)}  # fmt: skip


def _multi_step(rng: random.Random) -> Values:
  _, items = rng.choice(words.SHOP_ITEMS)
  start, packs, per_pack = rng.randint(5, 60), rng.randint(2, 8), rng.randint(3, 12)
  given = rng.randint(1, start + packs * per_pack - 1)
  box, boxes, sold = rng.randint(4, 12), rng.randint(2, 15), rng.randint(5, 40)
  wage, hours_day = rng.randint(10, 40), rng.randint(3, 10)
  days_week, weeks = rng.randint(2, 6), rng.randint(2, 8)
  weekly, weeks_to_save, saved = rng.randint(5, 50), rng.randint(2, 20), rng.randint(0, 200)
  third = rng.randint(10, 150)
  spent = rng.randint(1, 2 * third - 1)
  return {**people(rng), "items": items, "start": start, "packs": packs, "per_pack": per_pack,
          "given": given, "left": start + packs * per_pack - given, "baked": sold + box * boxes,
          "sold": sold, "box": box, "boxes": boxes, "wage": wage, "hours_day": hours_day,
          "days_week": days_week, "weeks": weeks, "earned": wage * hours_day * days_week * weeks,
          "big_item": rng.choice(words.BIG_ITEMS), "goal": saved + weekly * weeks_to_save,
          "saved": saved, "weekly": weekly, "weeks_to_save": weeks_to_save, "budget": 3 * third,
          "spent": spent, "left_money": 2 * third - spent}  # fmt: skip


def _geometry(rng: random.Random) -> Values:
  length, width, depth = rng.randint(3, 40), rng.randint(2, 30), rng.randint(2, 20)
  cost = rng.randint(2, 15)
  base, height, side = 2 * rng.randint(2, 20), rng.randint(2, 30), rng.randint(2, 25)
  return {"length": length, "width": width, "depth": depth, "cost": cost, "area": length * width,
          "perimeter": 2 * (length + width), "fence_cost": 2 * (length + width) * cost,
          "volume": length * width * depth, "base": base, "height": height,
          "triangle": base * height // 2, "square_perimeter": 4 * side,
          "square_area": side * side}  # fmt: skip


def _interest(rng: random.Random) -> Values:
  principal, rate, years = 100 * rng.randint(5, 100), rng.randint(1, 12), rng.randint(2, 10)
  tens = rng.randint(1, 9)
  interest = principal * rate * years // 100
  return {**people(rng), "principal": principal, "rate": rate, "years": years,
          "interest": interest, "balance": principal + interest, "big_principal": 10000 * tens,
          "compound": tens * (100 + rate) ** 2}  # fmt: skip


def _clock(minutes: int) -> str:
  return f"{minutes // 60}:{minutes % 60:02d}"


def _division(rng: random.Random) -> Values:
  students, team, bus = rng.randint(20, 200), rng.randint(3, 12), rng.randint(20, 50)
  start, duration = rng.randrange(6 * 60, 20 * 60, 5), rng.randrange(40, 240, 5)  # ends by 23:55
  return {"students": students, "team": team, "teams": students // team,
          "left_over": students % team, "bus": bus, "buses": -(-students // bus),
          "start": _clock(start), "duration": duration, "end": _clock(start + duration),
          "end_minutes": start + duration}  # fmt: skip


def _arithmetic(rng: random.Random) -> Values:
  a, b, c = rng.randint(2, 99), rng.randint(2, 30), rng.randint(2, 30)
  d = rng.randint(1, min(50, (a + b) * c - 1))  # the bracket's result stays positive
  big, factor, divisor = rng.randint(11, 999), rng.randint(2, 99), rng.randint(2, 25)
  quotient, root = rng.randint(2, 99), rng.randint(2, 99)
  return {"a": a, "b": b, "c": c, "d": d, "a_plus_bc": a + b * c, "bracket": (a + b) * c - d,
          "big": big, "factor": factor, "product": big * factor, "divisor": divisor,
          "dividend": divisor * quotient, "quotient": quotient, "square": root * root,
          "root": root}  # fmt: skip


# fmt: off
MATH_TEMPLATES: tuple[Template, ...] = (
  (_percent, "part", "What is {percent}% of {whole}?"),
  (_percent, "part",
   "A school has {whole} students, and {percent}% of them walk to school. How many students walk "
   "to school?"),
  (_percent, "part",
   "{name} wants to buy a {item} that costs ${whole}. The shop takes {percent}% off. How much "
   "money does {name} save?"),
  (_percent, "sale",
   "A {item} costs ${whole}. In a sale its price is cut by {percent}%. What is the sale price?"),
  (_percent, "raised",
   "The price of a {item} was ${whole} last year. It has gone up by {percent}%. What does it "
   "cost now?"),
  (_percent, "percent",
   "A survey asked {whole} people, and {part} of them said yes. What percentage said yes?"),
  (_conversion, "small_amount", "How many {small} are there in {n} {big}?"),
  (_conversion, "n", "Convert {small_amount} {small} to {big}."),
  (_ages, "young",
   "{name} is {gap} years older than {name2}. In {later} years, the sum of their ages will be "
   "{sum_later}. How old is {name2} now?"),
  (_ages, "old_later",
   "{name} is {times} times as old as {name2}, who is {young} years old. How old will {name} be "
   "in {later} years?"),
  (_ages, "young_ago",
   "In {later} years, {name2} will be {young_later} years old. How old was {name2} {ago} years "
   "ago?"),
  (_ages, "age_then", "{name} was born in {born}. How old will {they} turn in {year}?"),
  (_shopping, "change",
   "{name} buys {count} {items} at ${price} each and pays with a ${bill} note. How much change "
   "does {they} get?"),
  (_shopping, "total",
   "At the market, {name} buys {count} {items} for ${price} each and {count2} {items2} for "
   "${price2} each. How much does {they} spend in total?"),
  (_shopping, "price", "{count} {items} cost ${cost} in total. How much does one {item} cost?"),
  (_shopping, "afford",
   "{name} has ${budget}, and one {item} costs ${price}. How many {items} can {they} buy?"),
  (_rates, "distance",
   "A {vehicle} travels at {speed} km/h for {hours} hours. How far does it go?"),
  (_rates, "speed",
   "A {vehicle} covers {distance} km in {hours} hours. What is its average speed?"),
  (_rates, "hours",
   "How long does a {vehicle} going at {speed} km/h take to travel {distance} km?"),
  (_rates, "days",
   "A book has {pages} pages. If {name} reads {rate} pages a day, how many days will {they} need "
   "to finish it?"),
  (_rates, "together",
   "{name} can paint a fence in {time_a} hours, and {name2} can paint the same fence in {time_b} "
   "hours. How long will it take them working together?"),
  (_rates, "minutes",
   "A tap fills a {volume}-litre tank at {litres} litres per minute. How many minutes does it "
   "take to fill the tank?"),
  (_algebra, "x", "Solve for x: {a}x + {b} = {c}"),
  (_algebra, "x", "If {a} times a number plus {b} equals {c}, what is the number?"),
  (_algebra, "x",
   "I think of a number, multiply it by {a} and subtract {less}. The result is {c_less}. What "
   "was my number?"),
  (_algebra, "x", "Solve for x: {a}(x - {shift}) = {c_shift}"),
  (_algebra, "x", "Find x and y if x + y = {total} and x - y = {difference}."),
  (_algebra, "x",
   "The sum of two numbers is {total}, and their difference is {difference}. What is the larger "
   "number?"),
  (_sequences, "next_arith", "What is the next number in the sequence {arith}, ...?"),
  (_sequences, "nth_term",
   "An arithmetic sequence starts at {start} and goes up by {step} each time. What is its {nth} "
   "term?"),
  (_sequences, "next_geo", "What number comes next: {geo}, ...?"),
  (_sequences, "sum_to", "What is the sum of all whole numbers from 1 to {last}?"),
  (_sequences, "arith_sum",
   "What is the sum of the first {terms} terms of the sequence {arith}, ...?"),
  (_fractions, "sum", "What is {a}/{b} + {c}/{d}? Give the answer as a fraction in lowest terms."),
  (_fractions, "difference", "Compute {a}/{b} - {c}/{d} and simplify the result."),
  (_fractions, "product", "Multiply {a}/{b} by {c}/{d} and simplify."),
  (_fractions, "of_multiple", "What is {a}/{b} of {multiple}?"),
  (_fractions, "slices_left",
   "A pizza is cut into {slices} equal slices. {name} eats {a}/{b} of it. How many slices are "
   "left?"),
  (_averages, "mean", "{name}'s test scores are {scores}. What is {their} average score?"),
  (_averages, "last",
   "{name} scored {first_scores} on {their} first {tests} tests. What must {they} score on the "
   "next test to average {mean} over all of them?"),
  (_averages, "mean",
   "A cafe sold {scores} cups of coffee on {count} days. What is the average number of cups sold "
   "per day?"),
  (_ratios, "part_b",
   "A bag holds {colour} and {colour2} marbles in the ratio {ra}:{rb}. There are {total} marbles "
   "in all. How many are {colour2}?"),
  (_ratios, "part_b",
   "A recipe uses flour and sugar in the ratio {ra}:{rb}. How many grams of sugar go with "
   "{part_a} grams of flour?"),
  (_ratios, "probability",
   "A bag has {first} {colour} marbles and {second} {colour2} marbles. If you take one at "
   "random, what is the probability that it is {colour}?"),
  (_ratios, "part_a",
   "{name} and {name2} share ${total} in the ratio {ra}:{rb}. How much does {name} get?"),
  (_multi_step, "left",
   "{name} has {start} {items}. {They} buys {packs} packs of {per_pack} {items} each, then gives "
   "{given} to a friend. How many {items} does {name} have now?"),
  (_multi_step, "boxes",
   "{name} baked {baked} cookies. {They} sold {sold} of them and packed the rest into boxes of "
   "{box}. How many boxes did {they} fill?"),
  (_multi_step, "earned",
   "{name} earns ${wage} an hour and works {hours_day} hours a day, {days_week} days a week. How "
   "much does {they} earn in {weeks} weeks?"),
  (_multi_step, "weeks_to_save",
   "{name} wants a {big_item} that costs ${goal}. {They} has ${saved} and saves ${weekly} a "
   "week. In how many weeks can {they} buy it?"),
  (_multi_step, "left_money",
   "{name} had ${budget}. {They} spent a third of it on a {big_item} and ${spent} on lunch. How "
   "much money is left?"),
  (_geometry, "area",
   "A rectangular room is {length} m long and {width} m wide. What is its floor area?"),
  (_geometry, "fence_cost",
   "A rectangular garden measures {length} m by {width} m. Fencing costs ${cost} per metre. How "
   "much does it cost to fence the whole garden?"),
  (_geometry, "triangle",
   "What is the area of a triangle with a base of {base} cm and a height of {height} cm?"),
  (_geometry, "volume",
   "A box is {length} cm long, {width} cm wide and {depth} cm deep. What is its volume?"),
  (_geometry, "square_area",
   "A square has a perimeter of {square_perimeter} cm. What is its area?"),
  (_geometry, "perimeter",
   "What is the perimeter of a rectangle {length} cm long and {width} cm wide?"),
  (_interest, "interest",
   "{name} puts ${principal} into a savings account that pays {rate}% simple interest a year. "
   "How much interest does {they} earn in {years} years?"),
  (_interest, "balance",
   "How much money is in an account after {years} years if ${principal} is invested at {rate}% "
   "simple interest a year?"),
  (_interest, "compound",
   "You invest ${big_principal} at {rate}% interest, compounded yearly. How much do you have "
   "after 2 years?"),
  (_division, "teams",
   "{students} students are split into teams of {team}. How many full teams are there, and how "
   "many students are left over?"),
  (_division, "buses",
   "A school trip has {students} students, and each bus holds {bus}. How many buses are needed?"),
  (_division, "end_minutes",
   "A film starts at {start} and lasts {duration} minutes. At what time does it end?"),
  (_division, "duration",
   "A train leaves at {start} and arrives at {end}. How many minutes does the journey take?"),
  (_arithmetic, "a_plus_bc", "What is {a} + {b} × {c}?"),
  (_arithmetic, "bracket", "Calculate ({a} + {b}) × {c} - {d}."),
  (_arithmetic, "product", "What is {big} × {factor}?"),
  (_arithmetic, "quotient", "What is {dividend} ÷ {divisor}?"),
  (_arithmetic, "root", "What is the square root of {square}?"),
)
# fmt: on
