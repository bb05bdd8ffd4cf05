"""Word lists of the generated task families (`task_families`, `task_family_problems`):
names, objects and units for the math and reasoning problems, roles and requests for
role-play, and the writing forms with their topics. All written for this repository.

Every list is a tuple in a fixed order (the generators draw from them with seeded RNGs);
nouns that the problems pluralise come as (singular, plural) pairs.
"""

from __future__ import annotations

# fmt: off
FEMALE_NAMES = ("Alice", "Amara", "Anna", "Beatriz", "Chloe", "Daniela", "Elena", "Emma",
                "Fatima", "Grace", "Hana", "Ines", "Isabel", "Julia", "Keiko", "Laila", "Lucy",
                "Maya", "Mei", "Nadia", "Nora", "Olivia", "Priya", "Rosa", "Sara", "Sofia",
                "Tara", "Uma", "Vera", "Yasmin", "Zoe", "Ingrid")
MALE_NAMES = ("Adam", "Ahmed", "Ben", "Carlos", "Daniel", "David", "Diego", "Ethan", "Felix",
              "George", "Hassan", "Hugo", "Ivan", "Jack", "James", "Kenji", "Leo", "Liam",
              "Lucas", "Mateo", "Noah", "Omar", "Oscar", "Pablo", "Raj", "Sam", "Tom", "Victor",
              "Wei", "Yusuf", "Kofi", "Marco")

# Things bought or counted in word problems: (singular, plural).
SHOP_ITEMS = (("notebook", "notebooks"), ("pencil", "pencils"), ("apple", "apples"),
              ("ticket", "tickets"), ("cupcake", "cupcakes"), ("candle", "candles"),
              ("marker", "markers"), ("sandwich", "sandwiches"), ("mango", "mangoes"),
              ("toy car", "toy cars"), ("comic book", "comic books"), ("bottle of juice",
              "bottles of juice"), ("plant pot", "plant pots"), ("puzzle", "puzzles"),
              ("pair of socks", "pairs of socks"), ("bag of rice", "bags of rice"),
              ("loaf of bread", "loaves of bread"), ("box of tea", "boxes of tea"),
              ("postcard", "postcards"), ("sticker", "stickers"), ("muffin", "muffins"),
              ("lemon", "lemons"), ("basketball", "basketballs"), ("mug", "mugs"))
BIG_ITEMS = ("bicycle", "laptop", "winter coat", "guitar", "camera", "sofa", "pair of shoes",
             "tablet", "desk chair", "tent", "watch", "backpack", "microwave", "printer",
             "video game", "skateboard", "lamp", "suitcase", "coffee machine", "phone")
VEHICLES = ("car", "train", "bus", "cyclist", "truck", "ferry", "motorbike", "delivery van",
            "high-speed train", "tractor")
MARBLE_COLOURS = ("red", "blue", "green", "yellow", "white", "black", "orange", "purple")
# (larger unit, smaller unit, how many smaller units make one larger unit)
UNIT_CONVERSIONS = (("hours", "minutes", 60), ("minutes", "seconds", 60), ("days", "hours", 24),
                    ("weeks", "days", 7), ("kilometres", "metres", 1000),
                    ("metres", "centimetres", 100), ("centimetres", "millimetres", 10),
                    ("kilograms", "grams", 1000), ("litres", "millilitres", 1000),
                    ("feet", "inches", 12), ("yards", "feet", 3), ("years", "months", 12),
                    ("gallons", "quarts", 4), ("tonnes", "kilograms", 1000),
                    ("centuries", "years", 100), ("decades", "years", 10))
MONTHS = ("January", "February", "March", "April", "May", "June", "July", "August",
          "September", "October", "November", "December")
WEEKDAYS = ("Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday")

# Reasoning: (comparative, opposite, superlative, opposite superlative)
COMPARATIVES = (("taller", "shorter", "tallest", "shortest"),
                ("older", "younger", "oldest", "youngest"),
                ("faster", "slower", "fastest", "slowest"),
                ("heavier", "lighter", "heaviest", "lightest"),
                ("richer", "poorer", "richest", "poorest"),
                ("stronger", "weaker", "strongest", "weakest"))
# Category chains for syllogisms (each a kind of the next); made-up syllables for abstract ones.
CATEGORY_CHAINS = (("sparrow", "bird", "animal"), ("rose", "flower", "plant"),
                   ("violin", "string instrument", "instrument"), ("oak", "tree", "plant"),
                   ("carrot", "vegetable", "food"), ("square", "rectangle", "shape"),
                   ("laptop", "computer", "machine"), ("poodle", "dog", "mammal"),
                   ("novel", "book", "publication"), ("diamond", "gem", "mineral"),
                   ("cobra", "snake", "reptile"), ("tulip", "flower", "plant"),
                   ("whale", "mammal", "animal"), ("sonnet", "poem", "text"))
# Names of individuals in syllogisms ("Pip is a rose. Every rose is a flower.").
PET_NAMES = ("Pip", "Rex", "Luna", "Max", "Coco", "Nemo", "Ziggy", "Bella", "Toby", "Milo",
             "Kiki", "Bolt", "Pebble", "Biscuit", "Sunny", "Shadow")
WORDS_TO_SPELL = ("strawberry", "mississippi", "bookkeeper", "banana", "committee", "parallel",
                  "assessment", "necessary", "occurrence", "balloon", "coffee", "pepper",
                  "bubble", "possession", "address", "referee", "millennium", "tattoo",
                  "hippopotamus", "embarrass", "success", "accommodation", "cappuccino",
                  "giraffe", "mammal", "intelligence", "programming", "independence")
LIGHT_THINGS = ("feathers", "popcorn", "cotton wool", "paper", "balloons", "leaves")
HEAVY_THINGS = ("iron", "bricks", "lead", "stones", "sand", "steel")
SYLLABLES = ("bli", "zor", "ka", "mep", "tru", "gal", "fen", "quo", "dri", "lum", "pax", "ves",
             "ro", "sni", "tob", "wex")
# Words for odd-one-out and grouping questions, by category.
CATEGORY_WORDS = {
  "fruits": ("apple", "banana", "cherry", "mango", "pear", "plum", "grape", "kiwi"),
  "vegetables": ("carrot", "onion", "potato", "spinach", "cabbage", "leek", "pepper"),
  "mammals": ("horse", "whale", "bat", "tiger", "rabbit", "dolphin", "goat", "elephant"),
  "birds": ("eagle", "penguin", "sparrow", "owl", "parrot", "swan", "ostrich", "robin"),
  "tools": ("hammer", "saw", "wrench", "screwdriver", "chisel", "drill", "pliers"),
  "instruments": ("violin", "piano", "trumpet", "flute", "drum", "cello", "harp", "guitar"),
  "countries": ("Brazil", "Japan", "Kenya", "Norway", "Chile", "Egypt", "India", "Canada"),
  "colours": ("crimson", "teal", "amber", "violet", "indigo", "scarlet", "ochre", "beige"),
  "planets": ("Mercury", "Venus", "Mars", "Jupiter", "Saturn", "Neptune", "Uranus"),
  "metals": ("iron", "copper", "silver", "gold", "zinc", "nickel", "aluminium", "tin"),
  "sports": ("tennis", "rugby", "cricket", "hockey", "volleyball", "golf", "badminton"),
}
# Analogies: pairs that share one relation (any two of a group make a question).
ANALOGY_GROUPS = (
  (("Paris", "France"), ("Tokyo", "Japan"), ("Cairo", "Egypt"), ("Lima", "Peru"),
   ("Ottawa", "Canada"), ("Rome", "Italy"), ("Nairobi", "Kenya"), ("Oslo", "Norway")),
  (("puppy", "dog"), ("kitten", "cat"), ("calf", "cow"), ("foal", "horse"), ("cub", "bear"),
   ("lamb", "sheep"), ("chick", "hen"), ("tadpole", "frog")),
  (("hot", "cold"), ("up", "down"), ("early", "late"), ("full", "empty"), ("light", "dark"),
   ("open", "closed"), ("fast", "slow"), ("loud", "quiet")),
  (("pen", "write"), ("knife", "cut"), ("broom", "sweep"), ("shovel", "dig"), ("oven", "bake"),
   ("needle", "sew"), ("key", "unlock"), ("ladder", "climb")),
  (("bird", "nest"), ("bee", "hive"), ("horse", "stable"), ("dog", "kennel"),
   ("spider", "web"), ("fish", "water"), ("rabbit", "burrow"), ("ant", "anthill")),
  (("doctor", "hospital"), ("teacher", "school"), ("chef", "kitchen"), ("pilot", "cockpit"),
   ("judge", "court"), ("librarian", "library"), ("farmer", "farm"), ("actor", "stage")),
)
# (condition, consequence, the consequence denied) of if-then rules.
RULES = (("it rains", "the streets get wet", "the streets are dry"),
         ("the alarm rings", "everyone leaves the building", "nobody left the building"),
         ("a number is divisible by 6", "it is even", "the number is odd"),
         ("the shop is open", "its lights are on", "the shop's lights are off"),
         ("water is heated to 100 degrees at sea level", "it boils", "the water is not boiling"),
         ("the battery is charged", "the torch works", "the torch does not work"),
         ("a student passes the exam", "she gets a certificate", "Mia has no certificate"),
         ("the plant gets no water", "it wilts", "the plant has not wilted"),
         ("the door is locked", "the key is missing from the hook", "the key is on its hook"),
         ("the password is wrong", "the login fails", "the login worked"),
         ("it is a weekday", "the bus runs", "the bus is not running"),
         ("the milk is old", "it smells sour", "the milk smells fine"),
         ("a shape is a square", "it has four sides", "the shape has three sides"),
         ("the printer is out of paper", "a red light blinks", "no red light is blinking"))
# Situations for commonsense questions ({name}, {they}, {their}: a person).
SITUATIONS = (
  "{name} left an ice cream cone on a park bench on a hot afternoon.",
  "{name} planted tomato seeds but forgot to water them for two weeks.",
  "{name} is driving and notices the fuel light has just come on.",
  "{name} put a glass bottle full of water in the freezer overnight.",
  "{name} forgot {their} umbrella, and dark clouds are gathering.",
  "{name} dropped {their} phone into a sink full of water.",
  "{name} has an exam tomorrow morning and it is already midnight.",
  "{name} sees smoke coming out of the neighbour's kitchen window.",
  "{name} baked a cake but took it out of the oven too early.",
  "{name} is lost in a city where {they} does not speak the language.",
  "{name} ordered a blue shirt online, but a red one arrived.",
  "{name} left a window open during a storm.",
  "{name} found a wallet with an ID card on the pavement.",
  "{name} is hiking and the sun will set in thirty minutes.",
  "{name} wore new shoes for a long walk and now has blisters.",
  "{name} poured salt instead of sugar into {their} coffee.",
  "{name} missed the last train home.",
  "{name} left bread on the kitchen counter for two weeks.",
  "{name} has two meetings booked at the same time.",
  "{name} lent a book to a friend a year ago and never got it back.",
)

# Role-play: who the assistant plays, and what the user asks of that role.
ROLES = (
  "a medieval blacksmith", "a ship's captain in the 1800s", "a museum tour guide",
  "a customer support agent for an internet provider", "a personal fitness coach",
  "a detective in 1920s London", "a job interviewer at a software company", "a travel agent",
  "a chef in a busy restaurant", "an astronaut on the International Space Station",
  "a pirate", "a school librarian", "a kind primary-school teacher", "a wise old wizard",
  "a sports commentator", "a park ranger", "a nutritionist", "a Socratic philosophy tutor",
  "a stand-up comedian", "a news reporter at a festival", "a car salesperson",
  "a barista at a small cafe", "a time traveller from the year 3000", "a robot butler",
  "a Roman senator", "a tech startup founder", "a career counsellor", "a flight attendant",
  "a dragon guarding treasure", "a hotel receptionist", "a marine biologist",
  "a medieval king", "a video game character", "a veterinarian", "a financial advisor",
  "an architect", "a gardener", "a taxi driver in New York", "a poet", "a lighthouse keeper",
  "a mountain guide", "a yoga instructor", "a movie director", "an ancient Greek philosopher",
  "a fashion designer", "a firefighter", "a bookshop owner", "a language teacher",
  "a chess grandmaster", "a Shakespearean actor", "a tour guide in Rome", "a cat",
  "a friendly alien", "a detective's assistant", "a radio host", "a baker", "a farmer",
  "a debate coach", "an archaeologist", "a zookeeper", "a wedding planner", "a knight",
  "an interior designer", "a music teacher", "a startup investor", "a sailor",
  "a game show host", "a history professor", "a climate scientist", "a famous inventor",
  "a helpful librarian robot", "a superhero on a day off", "a medieval town crier",
)
ROLE_OPENERS = ("You are {role}.", "Pretend you are {role}.", "Act as {role}.",
                "Imagine you are {role}.", "Let's role-play: you are {role}.",
                "Stay in character as {role}.")
ROLE_REQUESTS = (
  "Introduce yourself to me, a first-time visitor.", "Describe a typical day in your life.",
  "Tell me about the hardest moment of your career.",
  "Give me advice for starting out in your line of work.",
  "I am a new apprentice. What should I learn first?", "What do you love most about what you do?",
  "I am upset because my order is late. Respond to me in character.",
  "Explain your job to a curious child.", "Tell me a story from your past in a few sentences.",
  "What would you say to someone who doubts your skills?",
  "Convince me to try something you recommend.",
  "I am interviewing you for a magazine. What is your biggest achievement?",
  "Welcome me and ask me three questions to get to know me.",
  "Give me a short pep talk before a big day.",
  "What mistake do beginners in your field make most?",
  "Describe your workplace so that I can picture it.", "How do you deal with a difficult day?",
  "I want to complain about a problem. Listen and help me in character.",
  "Tell me a secret of your trade.", "Describe the tools you use every day.",
  "Answer in character: what does success mean to you?",
  "Greet me at the start of a tour and explain what we will see.",
  "I made a mistake that affects you. Respond in character.",
  "What do you think the future of your profession looks like?",
  "Give me three rules you live by.", "Write a short diary entry about your day.",
  "Teach me one useful thing in under a minute.", "Respond to a customer who asks for a discount.",
  "Describe the most unusual request you ever received.",
  "Persuade me to join you on your next adventure.",
  "Explain what you would do in an emergency.", "Tell me how you got started.",
  "Give me feedback on my plan to follow in your footsteps.", "What is your favourite memory?",
  "Say goodbye to me at the end of the day, in character.", "Recommend a book to me and say why.",
  "I am nervous. Calm me down in character.", "What annoys you most about your job?",
  "Ask me a riddle that fits your role.", "Answer my question: why should I trust you?",
  "Plan my next hour with you, step by step.", "Tell me what you had for breakfast and why.",
  "Explain the most important skill in your work.",
  "I have never met anyone like you. Tell me about your world.",
  "Describe a problem you solved recently.",
  "Give me a warning about a common danger in your world.",
  "Write a short advertisement for your services.", "Tell me about a person who inspired you.",
  "What would you change about your world if you could?",
  "Interview me for a job working with you.",
  "Describe your proudest possession.", "How do you celebrate a good day?",
  "Explain a word or phrase only people in your world use.",
  "Give me directions to your favourite place.",
  "Tell me what you fear most.",
)

# Writing: forms, their templates and topics. Slots: {topic}; {tone}, {audience}, {length},
# {constraint} are drawn from the lists below.
WRITING_FORMS = {
  "story": (
    ("Write a short {tone} story about {topic}.", "Tell a {tone} story about {topic} in {length}.",
     "Write a story for {audience} about {topic}.",
     "Write the opening paragraph of a {tone} novel about {topic}.",
     "Write a fable about {topic} for {audience}, with a moral at the end.",
     "Write a story about {topic} {constraint}.",
     "Write a story of {length} about {topic} {constraint}."),
    ("a lost key", "a robot learning to paint", "a lighthouse keeper's last night",
     "two strangers stuck in a lift", "a dragon who is afraid of fire",
     "the first day at a new school",
     "a letter delivered fifty years late", "a town where it never stops raining", "a talking cat",
     "a chef who lost her sense of taste", "a map found in an old book", "a race against time",
     "a friendship between a child and an old neighbour", "a city after the power goes out",
     "a musician who plays one last concert", "a time machine that only goes back one day",
     "a garden that grows overnight", "the last tree on a planet", "an unexpected inheritance",
     "a snowstorm on a mountain pass", "a secret room in a library",
     "a dog that waits at a station",
     "a family road trip gone wrong", "a forgotten birthday", "an inventor's failed invention",
     "a ghost who is afraid of people", "a spaceship's broken engine", "a village festival",
     "a stolen painting", "a message in a bottle", "a runner's first marathon"),
  ),
  "poem": (
    ("Write a {tone} poem about {topic}.", "Write a haiku about {topic} for {audience}.",
     "Write a {tone} limerick about {topic}.",
     "Write a {tone} poem about {topic} in four rhyming lines.",
     "Write a {tone} sonnet about {topic}.",
     "Write a free-verse poem about {topic} for {audience}.",
     "Write a short poem about {topic} {constraint}."),
    ("the sea at dawn", "autumn leaves", "a city at night", "friendship", "the first snow",
     "a grandmother's kitchen", "the moon", "a long train journey", "coffee", "summer rain",
     "growing older", "a busy market", "the stars", "a river", "a quiet library", "hope",
     "a cat asleep in the sun", "mountains", "the end of a holiday", "a thunderstorm",
     "learning to ride a bicycle", "home", "a garden in spring", "silence", "the wind",
     "an old photograph", "Monday mornings", "a lighthouse", "the desert", "kindness"),
  ),
  "email": (
    ("Write a {tone} email to {topic}.", "Draft an email of {length} to {topic}.",
     "Write a polite but {tone} email to {topic}.", "Write a formal letter of {length} to {topic}.",
     "Write a text message to {topic}, in a {tone} tone."),
    ("my manager asking for Friday off", "a landlord about a broken heater",
     "a colleague thanking them for their help", "a customer apologising for a late delivery",
     "a professor asking for an extension", "a client proposing a meeting next week",
     "a team announcing a new project", "a neighbour about a noisy party",
     "a company asking for a refund", "a friend inviting them to a birthday dinner",
     "a hiring manager following up after an interview", "a supplier asking for a price quote",
     "the school about a child's absence", "a new team member welcoming them",
     "a hotel asking about a late check-in", "a mentor asking for career advice",
     "a bank reporting a lost card", "a volunteer group thanking its members",
     "a customer explaining a price increase", "a conference declining an invitation",
     "a library asking to renew a book", "the city council about a broken street light",
     "a former teacher saying thank you", "a recruiter declining a job offer",
     "a team about a change of meeting time", "an airline about lost luggage",
     "a gym cancelling a membership", "a coworker asking to swap shifts"),
  ),
  "blog": (
    ("Write an engaging introduction for a blog post about {topic}, aimed at {audience}.",
     "Write a catchy title and the first paragraph of a {tone} blog post about {topic}.",
     "Outline a blog post about {topic} for {audience}.",
     "Write a {tone} blog intro about {topic} in {length}."),
    ("working from home", "starting a vegetable garden", "learning to code as an adult",
     "saving money on groceries", "travelling on a budget", "the benefits of walking",
     "decluttering your home", "raising a puppy", "getting better sleep", "minimalist living",
     "cooking for one", "learning a second language", "running your first 5K",
     "photography with a phone", "reading more books", "cycling to work", "meal prepping",
     "staying focused while studying", "camping with kids", "reducing plastic waste",
     "building a morning routine", "choosing a first laptop", "visiting museums",
     "writing a journal", "moving to a new city", "keeping houseplants alive"),
  ),
  "product": (
    ("Write a {tone} product description for {topic}.",
     "Write a product description for {topic} in {length}.",
     "Write three {tone} advertising slogans for {topic}.",
     "Write an online shop listing for {topic} aimed at {audience}."),
    ("a reusable water bottle", "noise-cancelling headphones", "a handmade wooden chess set",
     "a solar phone charger", "an ergonomic office chair", "a smart thermostat",
     "a waterproof hiking backpack", "organic green tea", "a children's science kit",
     "a folding electric bike", "a cast-iron frying pan", "a mechanical keyboard",
     "a scented soy candle", "a travel pillow", "a fitness tracker", "a board game for families",
     "a bamboo toothbrush", "a portable projector", "a weekly planner notebook",
     "a coffee grinder", "wireless earbuds", "a yoga mat", "a robot vacuum cleaner",
     "a pair of running shoes", "a smart doorbell", "a beginner's watercolour set"),
  ),
  "speech": (
    ("Write a {tone} speech for {topic}.", "Write a {tone} toast for {topic}.",
     "Write the opening lines of a speech for {topic}, aimed at {audience}.",
     "Write a speech of {length} for {topic}."),
    ("a best friend's wedding", "a school graduation", "a colleague's retirement party",
     "the opening of a community garden", "a charity fundraiser", "a team's end-of-year party",
     "a grandparent's 80th birthday", "a science fair award ceremony", "a new library's opening",
     "a football team after a lost final", "the first day of a conference",
     "a farewell to a teacher", "a company's tenth anniversary", "a city marathon's start",
     "a volunteer appreciation evening", "an art exhibition opening", "a book launch",
     "welcoming new students", "a sibling's engagement party", "a local election debate"),
  ),
}
TONES = ("funny", "heartfelt", "formal", "friendly", "dramatic", "cheerful", "mysterious",
         "warm", "serious", "playful", "hopeful", "calm")  # none starts with a vowel: "a {tone}"
AUDIENCES = ("children", "teenagers", "busy parents", "retired people", "university students",
             "beginners", "experts", "a general audience", "small business owners", "travellers")
LENGTHS = ("about 100 words", "three short paragraphs", "five sentences", "under 150 words",
           "about 200 words", "two paragraphs")
CONSTRAINTS = ("with a surprise ending", "told in the first person", "with a hopeful ending",
               "with at least one line of dialogue", "set a hundred years in the future",
               "using only simple words", "told from the point of view of an animal",
               "in the present tense")
# fmt: on
