"""The word pools of the pretrained-model prompts: first names, cities and foods (retrieval, paper section 2) and
the objects of the boxes task (binding, section 5.6; ours, 40 household words: Gur-Arieh et al. draw theirs
from a longer list).

One word each, no word in two pools, and no city inside another city (the scoring rule looks for the city's
name in the output). 120 of each: the longest configured context (`qwen.context_lengths`) may use them all.
"""

NAMES = (
    "James", "Mary", "John", "Patricia", "Robert", "Jennifer", "Michael", "Linda", "William", "Elizabeth",
    "David", "Barbara", "Richard", "Susan", "Joseph", "Jessica", "Thomas", "Sarah", "Charles", "Karen",
    "Christopher", "Nancy", "Daniel", "Lisa", "Matthew", "Betty", "Anthony", "Margaret", "Mark", "Sandra",
    "Donald", "Ashley", "Steven", "Kimberly", "Paul", "Emily", "Andrew", "Donna", "Joshua", "Michelle",
    "Kenneth", "Dorothy", "Kevin", "Carol", "Brian", "Amanda", "George", "Melissa", "Edward", "Deborah",
    "Ronald", "Stephanie", "Timothy", "Rebecca", "Jason", "Sharon", "Jeffrey", "Laura", "Ryan", "Cynthia",
    "Jacob", "Kathleen", "Gary", "Amy", "Nicholas", "Shirley", "Eric", "Angela", "Jonathan", "Helen",
    "Stephen", "Anna", "Larry", "Brenda", "Justin", "Pamela", "Scott", "Nicole", "Brandon", "Emma",
    "Benjamin", "Samantha", "Samuel", "Katherine", "Gregory", "Christine", "Frank", "Debra", "Alexander", "Rachel",
    "Raymond", "Catherine", "Patrick", "Carolyn", "Jack", "Janet", "Dennis", "Ruth", "Jerry", "Maria",
    "Tyler", "Heather", "Aaron", "Diane", "Jose", "Virginia", "Adam", "Julie", "Henry", "Joyce",
    "Nathan", "Victoria", "Douglas", "Olivia", "Zachary", "Kelly", "Peter", "Christina", "Kyle", "Lauren",
)

CITIES = (
    "Tokyo", "Paris", "Mumbai", "London", "Berlin", "Madrid", "Rome", "Cairo", "Lagos", "Nairobi",
    "Lima", "Bogota", "Santiago", "Toronto", "Chicago", "Boston", "Seattle", "Denver", "Houston", "Phoenix",
    "Dallas", "Atlanta", "Miami", "Montreal", "Vancouver", "Havana", "Caracas", "Quito", "Montevideo", "Asuncion",
    "Dublin", "Lisbon", "Oslo", "Stockholm", "Helsinki", "Copenhagen", "Amsterdam", "Brussels", "Vienna", "Prague",
    "Warsaw", "Budapest", "Bucharest", "Sofia", "Athens", "Istanbul", "Ankara", "Tehran", "Baghdad", "Riyadh",
    "Dubai", "Doha", "Karachi", "Lahore", "Delhi", "Kolkata", "Chennai", "Bangalore", "Dhaka", "Kathmandu",
    "Colombo", "Bangkok", "Hanoi", "Manila", "Jakarta", "Singapore", "Seoul", "Beijing", "Shanghai", "Osaka",
    "Kyoto", "Taipei", "Sydney", "Melbourne", "Perth", "Auckland", "Wellington", "Brisbane", "Adelaide", "Johannesburg",
    "Accra", "Dakar", "Casablanca", "Tunis", "Algiers", "Khartoum", "Kampala", "Kigali", "Luanda", "Harare",
    "Zurich", "Geneva", "Munich", "Hamburg", "Milan", "Naples", "Venice", "Barcelona", "Valencia", "Seville",
    "Porto", "Marseille", "Lyon", "Edinburgh", "Glasgow", "Manchester", "Liverpool", "Krakow", "Riga", "Vilnius",
    "Tallinn", "Minsk", "Kyiv", "Moscow", "Tbilisi", "Yerevan", "Baku", "Tashkent", "Almaty", "Ulaanbaatar",
)

FOODS = (
    "Banana", "Orange", "Apple", "Mango", "Cherry", "Grape", "Lemon", "Peach", "Pear", "Plum",
    "Apricot", "Kiwi", "Papaya", "Pineapple", "Coconut", "Melon", "Watermelon", "Strawberry", "Blueberry", "Raspberry",
    "Fig", "Date", "Guava", "Lychee", "Pomegranate", "Avocado", "Tomato", "Potato", "Carrot", "Onion",
    "Garlic", "Pepper", "Cucumber", "Lettuce", "Spinach", "Cabbage", "Broccoli", "Cauliflower", "Celery", "Pumpkin",
    "Zucchini", "Eggplant", "Mushroom", "Corn", "Pea", "Bean", "Lentil", "Chickpea", "Rice", "Bread",
    "Pasta", "Noodles", "Pizza", "Burger", "Sandwich", "Taco", "Burrito", "Sushi", "Ramen", "Dumpling",
    "Pancake", "Waffle", "Croissant", "Bagel", "Muffin", "Cookie", "Cake", "Pie", "Donut", "Brownie",
    "Chocolate", "Candy", "Honey", "Jam", "Butter", "Cheese", "Yogurt", "Milk", "Cream", "Egg",
    "Bacon", "Ham", "Sausage", "Chicken", "Beef", "Pork", "Lamb", "Turkey", "Salmon", "Tuna",
    "Shrimp", "Lobster", "Crab", "Oyster", "Squid", "Tofu", "Hummus", "Falafel", "Curry", "Soup",
    "Salad", "Omelette", "Porridge", "Oatmeal", "Cereal", "Popcorn", "Pretzel", "Cracker", "Peanut", "Almond",
    "Walnut", "Cashew", "Pistachio", "Hazelnut", "Olive", "Pickle", "Ketchup", "Mustard", "Vinegar", "Caramel",
)

BOX_OBJECTS = ("cup", "key", "ring", "coin", "book", "pen", "watch", "shoe", "hat", "map", "lamp", "bell", "card",
               "doll", "fork", "mug", "ball", "comb", "kite", "drum", "sock", "bowl", "vase", "fan", "rope", "brush",
               "clock", "phone", "spoon", "plate", "glove", "scarf", "belt", "chair", "bottle", "jar", "pillow",
               "towel", "wallet", "candle")

# the colored-shapes task in words (probes, appendix H)
COLOR_WORDS = ("red", "blue", "green", "yellow", "purple", "orange", "pink", "brown", "black", "white", "gray", "cyan")
SHAPE_WORDS = ("circle", "square", "triangle", "star", "heart", "hexagon", "pentagon", "diamond", "oval", "cross",
               "arrow", "crescent")
ITEM_WORDS = tuple(f"item{i}" for i in range(1, 13))
