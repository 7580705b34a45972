"""A deterministic synthetic ESCI-style catalog, written in the official esci-data layout.

Numbers measured on it are NOT ESCI numbers: it exists so the default benchmark runs
offline, from a fresh clone, through the same loader as the real data.

Design:
* products in 40 categories, each with catalog nouns, materials, sizes, optional audience
  (men's/women's/kids'), 6 invented brands, and complementary categories;
  titles, bullet points (newline separated) and HTML descriptions, some null fields;
* a query is derived from a seed product: its category plus 1-4 constraints among
  brand, color, material, size and audience, written with deliberate vocabulary mismatch:
  query-side synonyms for the product noun (``couch`` for ``sofa``), color synonyms
  (``grey``/``gray``, ``dark blue``/``navy``), paraphrases (``for men``/``men's``) and
  misspellings;
* labels follow rules: E meets every constraint, S same category with exactly one
  constraint off, C a product of a complementary category, I anything else (hard
  negatives from the same category or sharing attribute words, and random products);
* each query is judged on a pool of 15-40 products; all other products are unjudged;
* about one query in seven (:data:`NEGATION_SHARE` of the draws) is a *negation* query: besides its constraints
  it excludes one material, color or brand value that other products of its category have
  (``running shoes without leather``, ``phone case not red``, ``backpack no kelvo``). E is a
  product meeting the constraints without the excluded value; a product meeting the constraints
  *with* the excluded value is I, and every such product (up to :data:`NEGATED_IN_POOL`) is
  judged, so the pool holds the hard negatives that carry the query's own words;
* ``shopping_queries_dataset_sources.csv`` (``query_id,source``, the layout of the release's
  file) says ``negations`` for those queries and ``other`` for the rest.
"""

from __future__ import annotations

import json
import random
from dataclasses import asdict, dataclass
from pathlib import Path

import pandas as pd

from stagebench.data.esci import EXAMPLES_FILE, PRODUCTS_FILE, SOURCES_FILE
from stagebench.errors import StagebenchError
from stagebench.files import (
    STAGING_MARK, Owned, atomic_write, check_destination, foreign_entry, inventory, json_record, remove_staging, staging,
    swap_in,
)
from stagebench.version import __version__

# key: (catalog nouns, query synonyms, materials, sizes, has_audience, complements)
CATEGORIES: dict[str, tuple[list[str], list[str], list[str], list[str], bool, list[str]]] = {
    "running_shoes": (["running shoes", "running sneakers"], ["trainers", "jogging shoes", "runners"],
                      ["mesh", "knit", "leather", "synthetic"], ["size 7", "size 8", "size 9", "size 10", "size 11"], True,
                      ["socks", "insoles"]),
    "socks": (["athletic socks", "crew socks"], ["gym socks", "sports socks"], ["cotton", "merino wool", "bamboo", "polyester"],
              ["6 pack", "12 pack", "3 pack"], True, ["running_shoes", "hiking_boots"]),
    "insoles": (["shoe insoles", "insoles"], ["foot inserts", "arch supports"], ["foam", "gel", "cork"],
                ["small", "medium", "large"], False, ["running_shoes", "hiking_boots"]),
    "hiking_boots": (["hiking boots"], ["trekking boots", "walking boots", "mountain boots"], ["leather", "suede", "nylon"],
                     ["size 8", "size 9", "size 10", "size 11"], True, ["socks", "insoles"]),
    "tshirt": (["t-shirt", "tee"], ["tee shirt", "crew neck top", "short sleeve top"], ["cotton", "polyester", "linen"],
               ["small", "medium", "large", "x-large"], True, ["jeans", "belt"]),
    "jeans": (["jeans", "denim jeans"], ["denim pants", "denims"], ["stretch denim", "cotton denim", "raw denim"],
              ["30W x 32L", "32W x 32L", "34W x 32L", "36W x 34L"], True, ["belt", "tshirt"]),
    "belt": (["belt"], ["waist strap", "waistband"], ["leather", "canvas", "faux leather"], ["small", "medium", "large"], True,
             ["jeans"]),
    "rain_jacket": (["rain jacket"], ["raincoat", "waterproof coat", "rain shell"], ["nylon", "polyester", "gore-tex"],
                    ["small", "medium", "large", "x-large"], True, ["backpack"]),
    "backpack": (["backpack"], ["rucksack", "daypack", "knapsack"], ["nylon", "canvas", "polyester", "leather"],
                 ["20L", "30L", "40L"], False, ["water_bottle", "laptop_sleeve"]),
    "water_bottle": (["water bottle"], ["drink bottle", "hydration flask", "canteen"], ["stainless steel", "plastic", "glass"],
                     ["500ml", "750ml", "1 liter"], False, ["backpack"]),
    "laptop": (["laptop", "notebook computer"], ["ultrabook", "portable pc"], ["aluminum", "plastic", "magnesium"],
               ["13 inch", "14 inch", "15.6 inch", "17 inch"], False, ["laptop_sleeve", "mouse", "usb_cable"]),
    "laptop_sleeve": (["laptop sleeve"], ["notebook case", "computer bag"], ["neoprene", "leather", "felt"],
                      ["13 inch", "14 inch", "15.6 inch"], False, ["laptop"]),
    "mouse": (["wireless mouse"], ["cordless mouse", "bluetooth mouse", "computer mice"], ["plastic", "rubberized", "aluminum"],
              ["compact", "full size"], False, ["mouse_pad", "laptop"]),
    "mouse_pad": (["mouse pad"], ["mousepad", "desk mat"], ["cloth", "rubber", "leather"], ["small", "large", "xl"], False,
                  ["mouse", "keyboard"]),
    "keyboard": (["mechanical keyboard"], ["gaming keyboard", "clicky keyboard"], ["aluminum", "plastic"],
                 ["full size", "tenkeyless", "60 percent"], False, ["mouse_pad", "mouse"]),
    "headphones": (["headphones", "over-ear headphones"], ["headset", "earphones", "cans"], ["plastic", "aluminum", "leather"],
                   ["standard"], False, ["usb_cable"]),
    "phone_case": (["phone case"], ["phone cover", "protective cover", "smartphone shell"], ["silicone", "leather", "tpu", "polycarbonate"],
                   ["iphone 14", "iphone 15", "galaxy s23", "pixel 8"], False, ["screen_protector", "phone_charger"]),
    "screen_protector": (["screen protector"], ["tempered glass film", "screen guard"], ["tempered glass", "pet film"],
                         ["iphone 14", "iphone 15", "galaxy s23", "pixel 8"], False, ["phone_case"]),
    "phone_charger": (["phone charger", "usb-c charger"], ["charging adapter", "power adapter", "wall plug"],
                      ["plastic", "gan"], ["20W", "30W", "65W"], False, ["usb_cable", "phone_case"]),
    "usb_cable": (["usb-c cable", "charging cable"], ["charger cord", "data cord"], ["braided nylon", "pvc"],
                  ["3 ft", "6 ft", "10 ft"], False, ["phone_charger"]),
    "coffee_maker": (["coffee maker", "drip coffee machine"], ["coffee brewer", "coffee pot"], ["stainless steel", "plastic", "glass"],
                     ["4 cup", "8 cup", "12 cup"], False, ["coffee_filter", "coffee_mug"]),
    "coffee_filter": (["coffee filters"], ["paper filters", "filter papers"], ["paper", "unbleached paper", "bamboo"],
                      ["#2", "#4", "basket"], False, ["coffee_maker"]),
    "coffee_mug": (["coffee mug"], ["coffee cup", "tea cup"], ["ceramic", "porcelain", "stainless steel", "glass"],
                   ["12 oz", "16 oz", "20 oz"], False, ["coffee_maker"]),
    "frying_pan": (["frying pan", "skillet"], ["fry pan", "saute pan"], ["cast iron", "stainless steel", "nonstick aluminum", "carbon steel"],
                   ["8 inch", "10 inch", "12 inch"], False, ["spatula"]),
    "spatula": (["spatula"], ["turner", "flipper"], ["silicone", "wood", "stainless steel"], ["small", "large"], False,
                ["frying_pan"]),
    "chef_knife": (["chef knife"], ["kitchen knife", "cooks knife"], ["stainless steel", "damascus steel", "ceramic"],
                   ["6 inch", "8 inch", "10 inch"], False, ["cutting_board"]),
    "cutting_board": (["cutting board"], ["chopping board", "chopping block"], ["bamboo", "wood", "plastic"],
                      ["small", "medium", "large"], False, ["chef_knife"]),
    "sofa": (["sofa"], ["couch", "settee", "loveseat"], ["leather", "velvet", "linen", "microfiber"],
             ["2 seater", "3 seater", "sectional"], False, ["throw_pillow"]),
    "throw_pillow": (["throw pillow", "cushion cover"], ["decorative pillow", "accent cushion"], ["velvet", "cotton", "linen"],
                     ["18x18", "20x20", "12x20"], False, ["sofa"]),
    "dining_chair": (["dining chair"], ["kitchen chair", "dinette chair"], ["wood", "velvet", "metal", "plastic"],
                     ["set of 2", "set of 4", "set of 6"], False, ["dining_table"]),
    "dining_table": (["dining table"], ["kitchen table", "dinner table"], ["oak", "glass", "marble", "pine"],
                     ["4 seat", "6 seat", "8 seat"], False, ["dining_chair"]),
    "desk_lamp": (["desk lamp", "table lamp"], ["reading light", "bedside light"], ["metal", "wood", "ceramic"],
                  ["small", "large"], False, ["light_bulb"]),
    "light_bulb": (["led light bulb"], ["led bulb", "light globe"], ["glass", "plastic"], ["60W equivalent", "100W equivalent", "40W equivalent"],
                   False, ["desk_lamp"]),
    "dog_bed": (["dog bed"], ["pet bed", "puppy cushion"], ["memory foam", "plush", "canvas"], ["small", "medium", "large"],
                False, ["dog_collar", "dog_leash"]),
    "dog_collar": (["dog collar"], ["pet collar", "puppy collar"], ["nylon", "leather", "biothane"], ["small", "medium", "large"],
                   False, ["dog_leash", "dog_bed"]),
    "dog_leash": (["dog leash"], ["dog lead", "pet lead"], ["nylon", "leather", "rope"], ["4 ft", "6 ft"], False,
                  ["dog_collar"]),
    "yoga_mat": (["yoga mat"], ["exercise mat", "pilates mat", "workout mat"], ["tpe", "pvc", "natural rubber", "cork"],
                 ["4mm", "6mm", "8mm"], False, ["yoga_block"]),
    "yoga_block": (["yoga block"], ["yoga brick", "exercise block"], ["foam", "cork", "bamboo"], ["standard", "large"], False,
                   ["yoga_mat"]),
    "camping_tent": (["camping tent"], ["dome tent", "backpacking shelter"], ["nylon", "polyester", "canvas"],
                     ["2 person", "4 person", "6 person"], False, ["sleeping_bag"]),
    "sleeping_bag": (["sleeping bag"], ["sleep sack", "camping quilt"], ["down", "synthetic fill", "flannel"],
                     ["regular", "long"], False, ["camping_tent"]),
}  # fmt: skip
COLORS = ["black", "white", "navy", "gray", "red", "blue", "green", "beige", "pink", "brown", "silver", "yellow", "purple", "orange"]
COLOR_SYNONYMS = {"navy": ["dark blue", "navy blue"], "gray": ["grey", "charcoal"], "beige": ["tan", "cream"],
                  "silver": ["metallic", "chrome"], "purple": ["violet", "lilac"], "brown": ["chocolate", "coffee colored"],
                  "red": ["crimson", "burgundy"], "black": ["jet black", "noir"], "white": ["ivory", "off white"]}  # fmt: skip
AUDIENCE_TITLE = {"men": "Men's", "women": "Women's", "kids": "Kids'"}
AUDIENCE_QUERY = {"men": ["for men", "mens", "men"], "women": ["for women", "womens", "ladies"], "kids": ["for kids", "boys", "girls", "youth"]}
FEATURES = ["lightweight", "durable", "breathable", "waterproof", "ergonomic", "compact", "premium", "easy to clean",
            "non-slip", "adjustable", "portable", "foldable", "eco-friendly", "heavy duty", "soft", "stylish"]  # fmt: skip
FILLERS = ["best", "cheap", "new", "gift", "sale", "quality", "2024", "top rated"]
_SYL = ["al", "ber", "cor", "dan", "el", "fin", "gro", "hal", "iv", "jor", "kel", "lum", "mar", "nor", "ost",
        "pra", "quin", "ros", "sol", "tar", "ul", "ven", "wex", "yar", "zen"]  # fmt: skip
ATTRS = ("brand", "color", "material", "size", "audience")
#: the share of queries that exclude a value, and the attributes they exclude
NEGATION_SHARE = 0.2
NEGATED_ATTRS = ("material", "color", "brand")
#: at most this many products with the excluded value are judged (as I) per negation query
NEGATED_IN_POOL = 8
NEGATION_FORMS = {"material": ["without {v}", "no {v}", "non {v}", "{v} free", "not {v}"],
                  "color": ["not {v}", "no {v}", "any color but {v}", "without {v}"],
                  "brand": ["not {v}", "no {v}", "non {v}", "other than {v}"]}  # fmt: skip


@dataclass(frozen=True)
class SyntheticSpec:
    seed: int = 13
    n_products: int = 20000
    n_test_queries: int = 500
    n_train_queries: int = 2000
    min_pool: int = 15
    max_pool: int = 40
    max_exact: int = 20

    def problems(self) -> list[tuple[str, str]]:
        """(field, why) for every value that cannot make a dataset; empty when all can."""
        out = []
        if self.n_products < MIN_PRODUCTS:
            out.append(("n_products", f"must be at least {MIN_PRODUCTS} (each query draws its distractors from "
                                      f"{MIN_PRODUCTS} products), got {self.n_products}"))  # fmt: skip
        if self.n_test_queries < 1:
            out.append(("n_test_queries", f"must be at least 1, got {self.n_test_queries}"))
        if self.n_train_queries < 0:
            out.append(("n_train_queries", f"must be at least 0, got {self.n_train_queries}"))
        if self.seed < 0:
            out.append(("seed", f"must be at least 0, got {self.seed}"))
        return out


#: the fewest products a dataset can have (distractors are sampled from this many)
MIN_PRODUCTS = 400


def _brands(rng: random.Random) -> dict[str, list[str]]:
    used: set[str] = set()
    out = {}
    for cat in CATEGORIES:
        names = []
        while len(names) < 6:
            b = (rng.choice(_SYL) + rng.choice(_SYL) + rng.choice(["", "a", "o", "ix", "ex"])).capitalize()
            if b not in used:
                used.add(b)
                names.append(b)
        out[cat] = names
    return out


def _typo(word: str, rng: random.Random) -> str:
    i = rng.randrange(1, len(word) - 1)
    op = rng.random()
    if op < 0.4:
        return word[:i] + word[i + 1] + word[i] + word[i + 2 :]
    if op < 0.7:
        return word[:i] + word[i + 1 :]
    return word[:i] + word[i] + word[i:]


def _make_products(spec: SyntheticSpec, rng: random.Random) -> list[dict]:
    brands = _brands(rng)
    cats = list(CATEGORIES)
    products = []
    ids: set[str] = set()
    alnum = "ABCDEFGHJKLMNPQRSTUVWXYZ0123456789"
    for _ in range(spec.n_products):
        cat = rng.choice(cats)
        nouns, _syn, materials, sizes, has_aud, _comp = CATEGORIES[cat]
        while True:
            pid = "B0" + "".join(rng.choice(alnum) for _ in range(8))
            if pid not in ids:
                ids.add(pid)
                break
        p = {
            "product_id": pid, "category": cat, "brand": rng.choice(brands[cat]), "color": rng.choice(COLORS),
            "material": rng.choice(materials), "size": rng.choice(sizes),
            "audience": rng.choice(list(AUDIENCE_TITLE)) if has_aud else None,
        }  # fmt: skip
        noun = nouns[0] if rng.random() < 0.75 else rng.choice(nouns)
        feats = rng.sample(FEATURES, 3)
        aud = f"{AUDIENCE_TITLE[p['audience']]} " if p["audience"] else ""
        forms = [
            f"{p['brand']} {aud}{p['material'].title()} {noun.title()}, {feats[0].title()}, {p['color'].title()}, {p['size']}",
            f"{aud}{feats[0].title()} {noun.title()} by {p['brand']} - {p['material']} - {p['color']} ({p['size']})",
            f"{p['brand']} {noun.title()} {p['size']} {p['color'].title()} {p['material'].title()} {aud.strip()}".strip(),
        ]
        title = rng.choice(forms)
        bullets = [
            f"{feats[1].upper()}: made of {p['material']} for everyday use",
            f"SIZE: {p['size']}",
            f"{feats[2].capitalize()} design that fits your routine",
        ]
        if rng.random() < 0.1:  # a query-side synonym sometimes appears in the text
            bullets.append(f"Also great as a {rng.choice(_syn)}")
        rng.shuffle(bullets)
        desc = (
            f"<p>The <b>{p['brand']}</b> {noun} is {feats[0]} and {feats[1]}.</p>"
            f"<ul><li>Color: {p['color']}</li><li>Material: {p['material']}</li></ul><br/>Ships in 1&ndash;2 days &amp; easy returns."
        )
        p["product_title"] = title
        p["product_bullet_point"] = "\n".join(bullets)
        p["product_description"] = desc if rng.random() > 0.08 else None
        p["product_brand"] = p["brand"] if rng.random() > 0.03 else None
        p["product_color"] = p["color"].title() if rng.random() > 0.05 else None
        products.append(p)
    return products


def _query_text(cat: str, cons: dict[str, str], rng: random.Random) -> str:
    nouns, syns, *_ = CATEGORIES[cat]
    noun = rng.choice(syns) if rng.random() < 0.5 else rng.choice(nouns)
    parts_front, parts_back = [], []
    for attr, val in cons.items():
        if attr == "brand":
            (parts_front if rng.random() < 0.7 else parts_back).append(val.lower())
        elif attr == "color":
            v = rng.choice(COLOR_SYNONYMS[val]) if val in COLOR_SYNONYMS and rng.random() < 0.35 else val
            parts_front.append(v)
        elif attr == "material":
            parts_front.append(val)
        elif attr == "size":
            parts_back.append(val.lower())
        elif attr == "audience":
            parts_back.append(rng.choice(AUDIENCE_QUERY[val]))
    rng.shuffle(parts_front)
    rng.shuffle(parts_back)
    words = " ".join(parts_front + [noun] + parts_back).split()
    if rng.random() < 0.15:
        long = [i for i, w in enumerate(words) if len(w) >= 5 and w.isalpha()]
        if long:
            i = rng.choice(long)
            words[i] = _typo(words[i], rng)
    if rng.random() < 0.1:
        words.insert(0, rng.choice(FILLERS))
    return " ".join(words)


def _mismatches(p: dict, cons: dict[str, str]) -> int:
    return sum(1 for a, v in cons.items() if p[a] != v)


def _negation_text(attr: str, value: str, rng: random.Random) -> str:
    return rng.choice(NEGATION_FORMS[attr]).format(v=value.lower())


def _excluded(seed_p: dict, cons: dict[str, str], same: list[dict], rng: random.Random) -> tuple[str, str] | None:
    """An (attribute, value) to exclude: not constrained, differing from the seed product's, and held by
    some product of the category that meets the constraints (so the exclusion removes something)."""
    options = []
    for a in NEGATED_ATTRS:
        if a in cons:
            continue
        values = sorted({p[a] for p in same if p[a] is not None and p[a] != seed_p[a] and _mismatches(p, cons) == 0})
        options += [(a, v) for v in values]
    return rng.choice(options) if options else None


@dataclass(frozen=True)
class Intent:
    """What a query asks for: the seed product's category, its constraints and the value it excludes."""

    category: str
    constraints: dict[str, str]
    excluded: tuple[str, str] | None

    def label(self, p: dict) -> str:
        """The generator's label of product ``p`` for this query, by the rules that label its pool (E
        meets every constraint without the excluded value, S misses exactly one, C is of a
        complementary category, I is anything else)."""
        if p["category"] == self.category:
            if self.excluded is not None and p[self.excluded[0]] == self.excluded[1]:
                return "I"
            return {0: "E", 1: "S"}.get(_mismatches(p, self.constraints), "I")
        return "C" if p["category"] in CATEGORIES[self.category][5] else "I"


def _make_queries(spec: SyntheticSpec, products: list[dict], rng: random.Random) -> list[dict]:
    by_cat: dict[str, list[dict]] = {}
    for p in products:
        by_cat.setdefault(p["category"], []).append(p)
    rows = []
    texts: set[str] = set()
    n_total = spec.n_test_queries + spec.n_train_queries
    qid = 0
    while qid < n_total:
        seed_p = rng.choice(products)
        cat = seed_p["category"]
        avail = [a for a in ATTRS if seed_p[a] is not None]
        rng.shuffle(avail)
        k = rng.choice([1, 2, 2, 3, 3, 4])
        cons = {a: seed_p[a] for a in avail[:k]}
        same = by_cat[cat]
        exact = [p for p in same if _mismatches(p, cons) == 0]
        i = k
        while len(exact) > spec.max_exact and i < len(avail):
            cons[avail[i]] = seed_p[avail[i]]
            i += 1
            exact = [p for p in exact if _mismatches(p, cons) == 0]
        negated = _excluded(seed_p, cons, same, rng) if rng.random() < NEGATION_SHARE else None
        with_value: list[dict] = []
        if negated is not None:
            a, v = negated
            with_value = [p for p in exact if p[a] == v]
            exact = [p for p in exact if p[a] != v]
        if len(exact) > spec.max_exact:
            continue
        text = _query_text(cat, cons, rng)
        if negated is not None:
            text = f"{text} {_negation_text(*negated, rng)}"
        if text in texts:
            continue
        texts.add(text)

        def ok(p: dict) -> bool:  # not the excluded value
            return negated is None or p[negated[0]] != negated[1]

        subst = [p for p in same if _mismatches(p, cons) == 1 and ok(p)]
        far = [p for p in same if (_mismatches(p, cons) >= 2 or not ok(p)) and p not in with_value]
        comp = [p for c in CATEGORIES[cat][5] for p in by_cat.get(c, [])]
        pool_size = rng.randint(spec.min_pool, spec.max_pool)
        pool = [(p, "E") for p in exact]
        pool += [(p, "I") for p in rng.sample(with_value, min(len(with_value), NEGATED_IN_POOL))]
        pool += [(p, "S") for p in rng.sample(subst, min(len(subst), rng.randint(2, 8)))]
        pool += [(p, "C") for p in rng.sample(comp, min(len(comp), rng.randint(1, 5)))]
        pool = pool[:pool_size] if len(pool) > pool_size else pool
        seen = {p["product_id"] for p, _ in pool}
        # hard negatives: same category but 2+ constraints off, or other categories sharing a constraint value
        shared = [p for p in rng.sample(products, 400) if p["category"] != cat and p["category"] not in CATEGORIES[cat][5]
                  and any(p.get(a) == v for a, v in cons.items() if a in ("color", "material", "size"))]  # fmt: skip
        related = {cat, *CATEGORIES[cat][5]}
        for cand in (far, shared, products):
            need = pool_size - len(pool)
            if need <= 0:
                break
            picks = [p for p in rng.sample(cand, min(len(cand), need * 3)) if p["product_id"] not in seen
                     and (cand is far or p["category"] not in related)]  # fmt: skip
            take = picks[: (need + 1) // 2 if cand is not products else need]
            for p in take:
                seen.add(p["product_id"])
                pool.append((p, "I"))
        split = "test" if qid < spec.n_test_queries else "train"
        for p, label in pool:
            rows.append({"query": text, "query_id": qid, "product_id": p["product_id"], "esci_label": label,
                         "split": split, "category": cat, "constraints": cons, "negation": negated is not None,
                         "excluded": negated})
        qid += 1
    return rows


def generate(output: str | Path, spec: SyntheticSpec = SyntheticSpec()) -> dict:
    """Write the two parquet files, a README and ``stagebench_dataset.json`` (the files and
    their digests) into ``output``; return statistics. ``output`` must be absent, empty or a
    dataset generate-data wrote (:data:`DATASET`); the new dataset is built beside it and
    swapped in complete."""

    out = Path(output)
    for name, why in spec.problems():
        raise StagebenchError(f"{name}: {why}")
    check_destination(out, DATASET)
    tmp = staging(out)
    try:
        stats = _write(tmp, spec)
        check_destination(out, DATASET)  # it may have changed while the dataset was written
        swap_in(tmp, out)
    except BaseException:
        remove_staging(tmp)
        raise
    return stats


def _write(out: Path, spec: SyntheticSpec) -> dict:
    rng = random.Random(spec.seed)
    products = _make_products(spec, rng)
    rows = _make_queries(spec, products, rng)
    small_rng = random.Random(spec.seed + 1)
    small = {q: int(small_rng.random() < 0.8) for q in {r["query_id"] for r in rows}}
    ex = pd.DataFrame(
        {
            "example_id": range(len(rows)),
            "query": [r["query"] for r in rows],
            "query_id": [r["query_id"] for r in rows],
            "product_id": [r["product_id"] for r in rows],
            "product_locale": "us",
            "esci_label": [r["esci_label"] for r in rows],
            "small_version": [small[r["query_id"]] for r in rows],
            "large_version": 1,
            "split": [r["split"] for r in rows],
        }
    )
    cols = ["product_id", "product_title", "product_description", "product_bullet_point", "product_brand", "product_color"]
    pr = pd.DataFrame({c: [p[c] for p in products] for c in cols})
    pr["product_locale"] = "us"
    atomic_write(out / EXAMPLES_FILE, ex.to_parquet(index=False))
    atomic_write(out / PRODUCTS_FILE, pr.to_parquet(index=False))
    sources = {r["query_id"]: "negations" if r["negation"] else "other" for r in rows}
    atomic_write(out / SOURCES_FILE, "query_id,source\n" + "".join(f"{q},{s}\n" for q, s in sources.items()))
    stats = {
        "spec": asdict(spec),
        "products": len(products),
        "categories": len({p["category"] for p in products}),
        "queries": {s: int(ex[ex.split == s].query_id.nunique()) for s in ("test", "train")},
        "judgments": len(ex),
        "labels": {k: int(v) for k, v in ex.esci_label.value_counts().sort_index().items()},
        "judged_products": int(ex.product_id.nunique()),
        "negation_queries": {s: len({r["query_id"] for r in rows if r["negation"] and r["split"] == s})
                             for s in ("test", "train")},
    }
    atomic_write(out / "README.md", README_HEAD + "Deterministic and synthetic: numbers measured on it are not ESCI "
                 f"numbers.\n\n```json\n{json.dumps(stats, indent=2)}\n```\n")  # fmt: skip
    files = inventory(out, leave_out={RECORD, STAGING_MARK})
    atomic_write(out / RECORD, json.dumps({"generated_by": f"stagebench {__version__} generate-data",
                                           "spec": asdict(spec), "files": files}, indent=2) + "\n")  # fmt: skip
    return stats


README_HEAD = "# Synthetic ESCI-style dataset (generated by `stagebench generate-data`)\n\n"
#: the record of what generate-data wrote: every file's sha256
RECORD = "stagebench_dataset.json"


#: the rule for replacing a dataset folder: generate-data wrote every file in it
DATASET = Owned("synthetic dataset", RECORD, json_record(RECORD, "a dataset generate-data wrote"))


@dataclass(frozen=True)
class Truth:
    """Every (query, product) pair of a generated dataset graded by the generator's own rules: the
    perfect judge of that dataset, for its judged pool and every pair outside it alike."""

    spec: SyntheticSpec
    products: dict[str, dict]
    intents: dict[str, Intent]

    def label(self, query_id: str, product_id: str) -> str | None:
        """E, S, C or I; None when the query or the product is not this dataset's."""
        intent, product = self.intents.get(query_id), self.products.get(product_id)
        return None if intent is None or product is None else intent.label(product)


def truth(folder: str | Path) -> Truth:
    """The rules of the dataset ``generate-data`` wrote in ``folder``, rebuilt from the seed and
    sizes its record holds and checked against it: every file's digest, and every judged row's label
    equal to the rebuilt one. Any other folder is refused in one line."""
    folder = Path(folder)
    record = folder / RECORD
    if not record.is_file():
        raise StagebenchError(f"{folder}: not a dataset stagebench generate-data wrote (no {RECORD}): its pairs have "
                              "no rules to grade them")  # fmt: skip
    try:
        meta = json.loads(record.read_text(encoding="utf-8"))
        spec = SyntheticSpec(**meta["spec"])
    except (ValueError, KeyError, TypeError) as exc:
        raise StagebenchError(f"{record}: holds no generator seed and sizes (written by an older stagebench?): "
                              f"regenerate the dataset with stagebench generate-data ({type(exc).__name__})") from None
    foreign = foreign_entry(folder, DATASET)
    if foreign is not None:
        raise StagebenchError(f"{folder}: {foreign}: the rules grade only the dataset generate-data wrote")
    rng = random.Random(spec.seed)
    products = _make_products(spec, rng)
    rows = _make_queries(spec, products, rng)
    ex = pd.read_parquet(folder / EXAMPLES_FILE, columns=["query_id", "product_id", "esci_label"])
    rebuilt = [(r["query_id"], r["product_id"], r["esci_label"]) for r in rows]
    if list(zip(ex["query_id"].tolist(), ex["product_id"].tolist(), ex["esci_label"].tolist())) != rebuilt:
        raise StagebenchError(f"{folder / EXAMPLES_FILE}: its rows are not what seed {spec.seed} and these sizes "
                              "generate (another stagebench version?): regenerate the dataset")  # fmt: skip
    intents = {str(r["query_id"]): Intent(r["category"], r["constraints"], r["excluded"]) for r in rows}
    return Truth(spec, {p["product_id"]: p for p in products}, intents)
