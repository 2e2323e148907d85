//! The lexical guard of the semantic cache: a small **signature** of the embedded turn that a
//! candidate must share, on top of the cosine threshold, to be served.
//!
//! Sentence embeddings place texts that differ only in an entity, a number, a direction or a
//! negation very close together ("What is the capital of Austria?" / "… of Australia?" at
//! 0.9+; "Convert 5 km to miles." / "Convert 5 miles to km." at 0.98), yet their answers
//! differ. Those differences are visible in a handful of tokens, which paraphrases ("What's
//! the capital city of Austria?") keep. So each text gets its [`Tokens`], reduced to a 64-bit
//! [`Signature`], and a stored turn is served only to a turn of the same signature.
//!
//! The tokens, read left to right over words (letters, digits, `_`, inner apostrophes),
//! numbers and a few symbols:
//!
//! 1. **Numbers**, normalized: `5`, `5.0`, `05` → `5`; `1,000` → `1000`; `-3` keeps its sign;
//!    number words (`three`, `twenty-five`, `two hundred` → `3`, `25`, `200`; `one` alone is
//!    left out, it is as often a pronoun); ordinals (`first`…`twelfth`, `1st`, `22nd` → `#1`,
//!    `#22`); the relative days `today`, `tonight`, `tomorrow`, `yesterday`.
//! 2. **Units** from a small table ([`UNITS`]: length, mass, volume, temperature, data,
//!    energy, `%`, currencies by word, ISO code or symbol), canonical (`kilometers` → `km`,
//!    `°F`/`Fahrenheit` → `°f`, `$`/`dollars`/`USD` → `usd`). A number directly before a unit
//!    — or with one word between that is not a preposition, as in `10 US dollars` (but not
//!    `5 to miles`), `100 degrees Fahrenheit` counting as `100 °F`, or after a currency symbol,
//!    `$10` — is bound to it (`10 usd`); digits glued to a unit are split first (`5km` →
//!    `5 km`). Unit words count whatever their case (`Celsius`). Ambiguous short symbols
//!    (`m`, `g`, `l`, `s`, `h`, `c`, `f`, …) and time units (seconds … years) count only bound
//!    to a number (`30 days`, not "what day"), otherwise they are ordinary words.
//! 3. **Names**: a word with an uppercase letter that is not just the capital of a sentence's
//!    first word (`Austria` mid-sentence; `USD`, `TCP`, `JavaScript`, `iPhone` anywhere), the
//!    pronoun `I` excepted, a possessive `'s` dropped; **code**: a word directly followed by
//!    `(` (`len()`, `sin(x)`), with an `_`, or mixing letters and digits (`mp3`, `ipv6`);
//!    **comparisons**: the word before `than` (`older than 30`). All lowercased.
//! 4. **Negation**: whether any of `not`, `no`, `never`, `none`, `nothing`, `nobody`,
//!    `nowhere`, `neither`, `nor`, `without`, `cannot` or a `…n't` word occurs (a flag, not a
//!    count).
//!
//! The signature is the ordered sequence of numbers, ordinals, days, names, code and
//! comparison tokens (so "from Paris to London" differs from "from London to Paris"), the
//! *set* of units and bound quantities (a conversion's direction is which unit carries the
//! number — "convert 5 km to miles" and "how many miles is 5 km" agree, "convert 5 miles to
//! km" does not), and the negation flag. Deterministic (no locale, no randomness: SHA-256 of the tokens), and bounded:
//! the first [`MAX_SCAN_BYTES`] of the text are read, at most [`MAX_ORDERED`] and
//! [`MAX_UNITS`] tokens of at most [`MAX_TOKEN_CHARS`] characters kept.
//!
//! What it cannot catch (cosine alone decides there): differences in ordinary lowercase words
//! — antonyms and other verbs or nouns ("enable"/"disable", "ascending"/"descending",
//! "open"/"close", "meat"/"vegetarian", "12 times 12"/"12 divided by 12"), swapped lowercase
//! arguments ("convert a string to an integer" / "an integer to a string"), and names written
//! in lowercase or first in a sentence ("austria", "Paris is …"). And it costs some hits:
//! a paraphrase that drops or adds a name, number, unit or negation, writes a name in another
//! case, spells a number differently than this reads it ("a couple", "one" vs `1`), or
//! reorders two names or numbers ("on March 3, from Paris to London") misses — the safe way
//! to be wrong: one more upstream call instead of a wrong answer.
//!
//! Measured with all-MiniLM-L6-v2 on testdata/cache/semantic (`scripts/semantic-eval`): at the
//! default threshold 0.93, near-misses served fall from 8/45 (cosine alone) to 2/45, and every
//! paraphrase keeps its signature (39/45 served either way; the 6 others are below 0.93).

use sha2::{Digest, Sha256};

/// Bytes of the text read (cut at a character boundary).
pub const MAX_SCAN_BYTES: usize = 8 * 1024;
/// Ordered tokens (numbers, names, code, comparisons) kept, the first ones.
pub const MAX_ORDERED: usize = 32;
/// Units and quantities kept, the first ones.
pub const MAX_UNITS: usize = 16;
/// Characters of a token kept.
pub const MAX_TOKEN_CHARS: usize = 32;

/// The key tokens of a text (see the module documentation).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Tokens {
    /// Numbers, ordinals, relative days, names, code and comparison words, in text order.
    pub ordered: Vec<String>,
    /// Units (`km`) and quantities (`5 km`), sorted, without repeats.
    pub units: Vec<String>,
    /// Whether a negation word occurs.
    pub negated: bool,
}

/// The digest of a text's [`Tokens`]: two turns may share an entry only when theirs are equal.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Signature(pub u64);

impl Tokens {
    /// Their signature: the first 8 bytes of SHA-256 over the tokens, fields separated.
    pub fn signature(&self) -> Signature {
        let mut h = Sha256::new();
        for t in &self.ordered {
            h.update(t.as_bytes());
            h.update([0x1f]);
        }
        h.update([0x1e]);
        for t in &self.units {
            h.update(t.as_bytes());
            h.update([0x1f]);
        }
        h.update([0x1e, u8::from(self.negated)]);
        let digest = h.finalize();
        let mut first = [0u8; 8];
        first.copy_from_slice(&digest[..8]);
        Signature(u64::from_be_bytes(first))
    }
}

/// The signature of `text`.
pub fn signature(text: &str) -> Signature {
    tokens(text).signature()
}

/// Whether a unit counts anywhere or only bound to a number.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reach {
    /// `miles`, `kg`, `euros`: a unit wherever it stands.
    Anywhere,
    /// `m`, `s`, `days`: a unit only right after a number (else an ordinary word).
    Bound,
}

use Reach::{Anywhere, Bound};

/// The unit table: `(canonical, reach, spellings)`, spellings lowercase. Deliberately small:
/// everyday measures and the major currencies.
pub const UNITS: &[(&str, Reach, &[&str])] = &[
    // Length.
    ("km", Anywhere, &["km", "kms", "kilometer", "kilometers", "kilometre", "kilometres"]),
    ("mi", Anywhere, &["mi", "mile", "miles"]),
    ("m", Anywhere, &["meter", "meters", "metre", "metres"]),
    ("m", Bound, &["m"]),
    ("cm", Anywhere, &["cm", "centimeter", "centimeters", "centimetre", "centimetres"]),
    ("mm", Anywhere, &["mm", "millimeter", "millimeters", "millimetre", "millimetres"]),
    ("in", Anywhere, &["inch", "inches"]),
    ("ft", Anywhere, &["ft", "foot", "feet"]),
    ("yd", Anywhere, &["yd", "yds", "yard", "yards"]),
    // Mass.
    ("kg", Anywhere, &["kg", "kgs", "kilogram", "kilograms", "kilogramme", "kilogrammes", "kilo", "kilos"]),
    ("g", Anywhere, &["gram", "grams", "gramme", "grammes"]),
    ("g", Bound, &["g"]),
    ("mg", Anywhere, &["mg", "milligram", "milligrams"]),
    ("lb", Anywhere, &["lb", "lbs", "pound", "pounds"]),
    ("oz", Anywhere, &["oz", "ounce", "ounces"]),
    ("t", Anywhere, &["ton", "tons", "tonne", "tonnes"]),
    ("st", Anywhere, &["stone", "stones"]),
    // Volume.
    ("l", Anywhere, &["liter", "liters", "litre", "litres"]),
    ("l", Bound, &["l"]),
    ("ml", Anywhere, &["ml", "milliliter", "milliliters", "millilitre", "millilitres"]),
    ("gal", Anywhere, &["gal", "gallon", "gallons"]),
    ("pt", Anywhere, &["pint", "pints"]),
    ("qt", Anywhere, &["quart", "quarts"]),
    ("cup", Anywhere, &["cup", "cups"]),
    ("tbsp", Anywhere, &["tbsp", "tablespoon", "tablespoons"]),
    ("tsp", Anywhere, &["tsp", "teaspoon", "teaspoons"]),
    // Area, speed.
    ("acre", Anywhere, &["acre", "acres"]),
    ("ha", Anywhere, &["hectare", "hectares"]),
    ("mph", Anywhere, &["mph"]),
    ("km/h", Anywhere, &["kph", "kmh"]),
    ("kn", Anywhere, &["knot", "knots"]),
    // Temperature, angle.
    ("°c", Anywhere, &["°c", "celsius", "centigrade"]),
    ("°f", Anywhere, &["°f", "fahrenheit"]),
    ("k", Anywhere, &["kelvin", "kelvins"]),
    ("°c", Bound, &["c"]),
    ("°f", Bound, &["f"]),
    ("k", Bound, &["k"]),
    ("deg", Anywhere, &["°", "degree", "degrees"]),
    ("rad", Anywhere, &["radian", "radians"]),
    // Data, energy, power.
    ("b", Anywhere, &["byte", "bytes"]),
    ("kb", Anywhere, &["kb", "kilobyte", "kilobytes"]),
    ("mb", Anywhere, &["mb", "megabyte", "megabytes"]),
    ("gb", Anywhere, &["gb", "gigabyte", "gigabytes"]),
    ("tb", Anywhere, &["tb", "terabyte", "terabytes"]),
    ("kib", Anywhere, &["kib"]),
    ("mib", Anywhere, &["mib"]),
    ("gib", Anywhere, &["gib"]),
    ("bit", Anywhere, &["bit", "bits"]),
    ("kcal", Anywhere, &["cal", "kcal", "calorie", "calories", "kilocalorie", "kilocalories"]),
    ("j", Anywhere, &["joule", "joules"]),
    ("kwh", Anywhere, &["kwh"]),
    ("w", Anywhere, &["watt", "watts"]),
    ("kw", Anywhere, &["kw", "kilowatt", "kilowatts"]),
    ("%", Anywhere, &["%", "percent"]),
    // Time: ordinary words unless counted ("30 days", "2 hours").
    ("ms", Bound, &["ms", "millisecond", "milliseconds"]),
    ("s", Bound, &["s", "sec", "secs", "second", "seconds"]),
    ("min", Bound, &["min", "mins", "minute", "minutes"]),
    ("h", Bound, &["h", "hr", "hrs", "hour", "hours"]),
    ("day", Bound, &["day", "days"]),
    ("week", Bound, &["week", "weeks"]),
    ("month", Bound, &["month", "months"]),
    ("year", Bound, &["year", "years", "yr", "yrs"]),
    // Currencies.
    ("usd", Anywhere, &["usd", "$", "dollar", "dollars"]),
    ("eur", Anywhere, &["eur", "€", "euro", "euros"]),
    ("gbp", Anywhere, &["gbp", "£", "sterling"]),
    ("jpy", Anywhere, &["jpy", "¥", "yen"]),
    ("cny", Anywhere, &["cny", "rmb", "yuan"]),
    ("inr", Anywhere, &["inr", "₹", "rupee", "rupees"]),
    ("chf", Anywhere, &["chf", "franc", "francs"]),
    ("cad", Anywhere, &["cad"]),
    ("aud", Anywhere, &["aud"]),
];

/// Words that negate (besides any `…n't`).
const NEGATIONS: &[&str] =
    &["not", "no", "never", "none", "nothing", "nobody", "nowhere", "neither", "nor", "without", "cannot"];
/// Words a number does not bind a unit across.
const LINKS: &[&str] =
    &["to", "into", "in", "per", "from", "of", "by", "and", "or", "than", "vs", "versus", "over", "a", "an", "the"];
/// Relative days: kept like dates.
const RELATIVE_DAYS: &[&str] = &["today", "tonight", "tomorrow", "yesterday"];
const ORDINALS: &[&str] = &[
    "first", "second", "third", "fourth", "fifth", "sixth", "seventh", "eighth", "ninth", "tenth", "eleventh",
    "twelfth",
];
const SMALL_NUMBERS: &[&str] = &[
    "zero",
    "one",
    "two",
    "three",
    "four",
    "five",
    "six",
    "seven",
    "eight",
    "nine",
    "ten",
    "eleven",
    "twelve",
    "thirteen",
    "fourteen",
    "fifteen",
    "sixteen",
    "seventeen",
    "eighteen",
    "nineteen",
];
const TENS: &[&str] = &["twenty", "thirty", "forty", "fifty", "sixty", "seventy", "eighty", "ninety"];

/// What the scanner reads.
#[derive(Debug, Clone, PartialEq)]
enum Lexeme {
    /// A word as written; `initial`: the first of a sentence; `call`: directly followed by `(`;
    /// `pause`: punctuation other than a hyphen since the previous lexeme.
    Word { text: String, initial: bool, call: bool, glued: bool, pause: bool },
    /// A normalized number; `glued`: no space since the previous lexeme.
    Number { value: String, glued: bool },
    /// A unit symbol (`%`, `°c`, `$`, …), as its table spelling.
    Symbol { spelling: &'static str },
}

/// What a lexeme means to the signature.
#[derive(Debug, Clone, PartialEq)]
enum Item {
    Number {
        value: String,
        glued: bool,
    },
    /// `fallback`: what the word is when a [`Bound`] unit does not follow a number.
    Unit {
        canonical: &'static str,
        reach: Reach,
        fallback: Box<Item>,
    },
    /// An ordered token (name, code, ordinal, relative day, comparison).
    Key(String),
    Negation,
    /// Any other word, lowercased.
    Plain(String),
}

/// The key tokens of `text`.
pub fn tokens(text: &str) -> Tokens {
    let items = interpret(scan(head(text)));
    let mut out = Tokens::default();
    let mut bound = vec![false; items.len()];
    for (i, item) in items.iter().enumerate() {
        if bound[i] {
            continue;
        }
        match item {
            Item::Number { value, .. } => match unit_after(&items, i) {
                Some(j) => {
                    bound[j] = true;
                    let Item::Unit { canonical, .. } = &items[j] else { unreachable!("unit_after finds units") };
                    push(&mut out.units, MAX_UNITS, format!("{value} {canonical}"));
                }
                None => push(&mut out.ordered, MAX_ORDERED, value.clone()),
            },
            Item::Unit { canonical, reach, fallback, .. } => {
                // A currency symbol glued before a number: `$10`.
                if let Some(Item::Number { value, glued: true }) = items.get(i + 1) {
                    if is_prefix_symbol(canonical) && !bound[i + 1] {
                        bound[i + 1] = true;
                        push(&mut out.units, MAX_UNITS, format!("{value} {canonical}"));
                        continue;
                    }
                }
                match (reach, fallback.as_ref()) {
                    (Anywhere, _) => push(&mut out.units, MAX_UNITS, canonical.to_string()),
                    (Bound, Item::Key(k)) => push(&mut out.ordered, MAX_ORDERED, k.clone()),
                    (Bound, _) => {}
                }
            }
            Item::Key(k) => push(&mut out.ordered, MAX_ORDERED, k.clone()),
            Item::Negation => out.negated = true,
            Item::Plain(_) => {}
        }
    }
    out.units.sort();
    out.units.dedup();
    out
}

/// The unit item a number at `i` binds to: the next item, or the one after a single name or
/// word in between that is not a preposition or conjunction (`10 US dollars`, `5 square km`,
/// but not `5 to miles`); [`Bound`] units must follow directly.
fn unit_after(items: &[Item], i: usize) -> Option<usize> {
    match items.get(i + 1)? {
        Item::Unit { .. } => Some(i + 1),
        Item::Key(_) => unit_anywhere(items, i + 2),
        Item::Plain(w) if !LINKS.contains(&w.as_str()) => unit_anywhere(items, i + 2),
        _ => None,
    }
}

fn unit_anywhere(items: &[Item], j: usize) -> Option<usize> {
    matches!(items.get(j)?, Item::Unit { reach: Anywhere, .. }).then_some(j)
}

fn is_prefix_symbol(canonical: &str) -> bool {
    matches!(canonical, "usd" | "eur" | "gbp" | "jpy" | "inr")
}

fn push(to: &mut Vec<String>, max: usize, token: String) {
    if to.len() < max {
        to.push(token.chars().take(MAX_TOKEN_CHARS).collect());
    }
}

/// The first [`MAX_SCAN_BYTES`] of `text`, cut at a character boundary.
fn head(text: &str) -> &str {
    if text.len() <= MAX_SCAN_BYTES {
        return text;
    }
    let mut end = MAX_SCAN_BYTES;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    &text[..end]
}

fn is_apostrophe(c: char) -> bool {
    c == '\'' || c == '\u{2019}'
}

/// Splits `text` into words, numbers and unit symbols; everything else separates them.
fn scan(text: &str) -> Vec<Lexeme> {
    let chars: Vec<char> = text.chars().collect();
    let mut out: Vec<Lexeme> = Vec::new();
    let (mut i, mut initial, mut glued, mut pause) = (0, true, false, false);
    let at = |k: usize| chars.get(k).copied();
    while i < chars.len() {
        let c = chars[i];
        let starts_number = c.is_ascii_digit()
            || (c == '.' && at(i + 1).is_some_and(|n| n.is_ascii_digit()) && !glued)
            || (c == '-' && at(i + 1).is_some_and(|n| n.is_ascii_digit() || n == '.') && !glued);
        if starts_number {
            let (value, next) = number(&chars, i);
            out.push(Lexeme::Number { value, glued });
            pause = false;
            // A number does not start a sentence's words: "5 km. Paris" still restarts below.
            initial = false;
            glued = true;
            i = next;
        } else if c.is_alphabetic() || c == '_' {
            let start = i;
            while i < chars.len() {
                let d = chars[i];
                let inner_apostrophe = is_apostrophe(d) && at(i + 1).is_some_and(char::is_alphabetic);
                if d.is_alphanumeric() || d == '_' || inner_apostrophe {
                    i += 1;
                } else {
                    break;
                }
            }
            let text: String = chars[start..i].iter().collect();
            out.push(Lexeme::Word { text, initial, call: at(i) == Some('('), glued, pause });
            initial = false;
            glued = true;
            pause = false;
        } else if c == '°'
            && at(i + 1).is_some_and(|n| matches!(n, 'c' | 'C' | 'f' | 'F'))
            && !at(i + 2).is_some_and(char::is_alphabetic)
        {
            let spelling = if matches!(chars[i + 1], 'c' | 'C') { "°c" } else { "°f" };
            out.push(Lexeme::Symbol { spelling });
            pause = false;
            glued = true;
            i += 2;
        } else if let Some(spelling) = symbol(c) {
            out.push(Lexeme::Symbol { spelling });
            pause = false;
            glued = true;
            i += 1;
        } else {
            let ends_sentence = matches!(c, '.' | '!' | '?' | ';' | ':' | '。' | '！' | '？')
                && at(i + 1).is_none_or(char::is_whitespace);
            if ends_sentence || c == '\n' {
                initial = true;
            }
            pause |= !(c.is_whitespace() || c == '-');
            glued = false;
            i += 1;
        }
    }
    out
}

/// The table spelling of a one-character unit symbol.
fn symbol(c: char) -> Option<&'static str> {
    Some(match c {
        '%' => "%",
        '°' => "°",
        '℃' => "°c",
        '℉' => "°f",
        '$' => "$",
        '€' => "€",
        '£' => "£",
        '¥' => "¥",
        '₹' => "₹",
        _ => return None,
    })
}

/// The number starting at `i` (digits, `,` thousands groups, a decimal part, a leading `-`),
/// normalized, and where it ends.
fn number(chars: &[char], mut i: usize) -> (String, usize) {
    let negative = chars[i] == '-';
    if negative {
        i += 1;
    }
    let digit = |k: usize| chars.get(k).is_some_and(char::is_ascii_digit);
    let mut int = String::new();
    while i < chars.len() {
        if digit(i) {
            int.push(chars[i]);
            i += 1;
        } else if chars[i] == ',' && !int.is_empty() && (1..=3).all(|k| digit(i + k)) && !digit(i + 4) {
            i += 1;
        } else {
            break;
        }
    }
    let mut frac = String::new();
    if chars.get(i) == Some(&'.') && digit(i + 1) {
        i += 1;
        while digit(i) {
            frac.push(chars[i]);
            i += 1;
        }
    }
    let int = int.trim_start_matches('0');
    let frac = frac.trim_end_matches('0');
    let mut value = if int.is_empty() { "0".to_string() } else { int.to_string() };
    if !frac.is_empty() {
        value = format!("{value}.{frac}");
    }
    if negative && value != "0" {
        value = format!("-{value}");
    }
    (value, i)
}

/// The value of a run of number words (`twenty five`, `two hundred`, `three thousand`).
fn number_words(words: &[String]) -> u64 {
    let (mut total, mut current) = (0u64, 0u64);
    for w in words {
        if let Some(v) = SMALL_NUMBERS.iter().position(|n| n == w) {
            current = current.saturating_add(v as u64);
        } else if let Some(v) = TENS.iter().position(|n| n == w) {
            current = current.saturating_add(20 + 10 * v as u64);
        } else if w == "hundred" {
            current = current.max(1).saturating_mul(100);
        } else if let Some(scale) = scale(w) {
            total = total.saturating_add(current.max(1).saturating_mul(scale));
            current = 0;
        }
    }
    total.saturating_add(current)
}

fn scale(word: &str) -> Option<u64> {
    match word {
        "thousand" => Some(1_000),
        "million" => Some(1_000_000),
        "billion" => Some(1_000_000_000),
        _ => None,
    }
}

fn is_number_word(word: &str) -> bool {
    SMALL_NUMBERS.contains(&word) || TENS.contains(&word) || word == "hundred" || scale(word).is_some()
}

fn unit_of(spelling: &str) -> Option<(&'static str, Reach)> {
    UNITS
        .iter()
        .find(|(_, _, spellings)| spellings.contains(&spelling))
        .map(|(canonical, reach, _)| (*canonical, *reach))
}

/// Reads the lexemes as numbers, units, key tokens, negations and plain words.
fn interpret(lexemes: Vec<Lexeme>) -> Vec<Item> {
    let mut items: Vec<Item> = Vec::with_capacity(lexemes.len());
    let mut i = 0;
    while i < lexemes.len() {
        match &lexemes[i] {
            Lexeme::Number { value, glued } => items.push(Item::Number { value: value.clone(), glued: *glued }),
            Lexeme::Symbol { spelling } => {
                if let Some((canonical, reach)) = unit_of(spelling) {
                    let fallback = Box::new(Item::Plain(String::new()));
                    items.push(Item::Unit { canonical, reach, fallback });
                }
            }
            Lexeme::Word { text, initial, call, glued, .. } => {
                let lower = text.to_lowercase();
                // A run of number words is one number.
                if is_number_word(&lower) {
                    let mut run = vec![lower.clone()];
                    let mut j = i + 1;
                    while let Some(Lexeme::Word { text, initial: false, pause: false, .. }) = lexemes.get(j) {
                        let next = text.to_lowercase();
                        if !is_number_word(&next) {
                            break;
                        }
                        run.push(next);
                        j += 1;
                    }
                    if run != ["one"] {
                        items.push(Item::Number { value: number_words(&run).to_string(), glued: *glued });
                        i = j;
                        continue;
                    }
                }
                let after_number = matches!(items.last(), Some(Item::Number { .. }));
                let after_degrees = matches!(items.last(), Some(Item::Unit { canonical: "deg", .. }));
                // `1st`, `22nd`: a number glued to an ordinal suffix.
                if *glued && after_number && matches!(lower.as_str(), "st" | "nd" | "rd" | "th") {
                    if let Some(Item::Number { value, .. }) = items.pop() {
                        items.push(Item::Key(format!("#{value}")));
                    }
                    i += 1;
                    continue;
                }
                // "than": the word compared keeps its place ("older than 30").
                if lower == "than" {
                    if let Some(Item::Plain(w)) = items.last() {
                        let w = w.clone();
                        items.pop();
                        items.push(Item::Key(w));
                    }
                    i += 1;
                    continue;
                }
                let word = word(text, &lower, *initial, *call);
                match unit_of(&lower) {
                    // "second" right after a number is time, elsewhere an ordinal.
                    Some((canonical, reach)) if after_number || after_degrees || reach == Anywhere => {
                        let fallback = Box::new(word);
                        items.push(Item::Unit { canonical, reach, fallback });
                    }
                    _ => items.push(word),
                }
            }
        }
        i += 1;
    }
    // "100 degrees Fahrenheit", "100° F", "degrees C": the degrees belong to the temperature,
    // and after them a `C` is one.
    let mut k = 0;
    while k + 1 < items.len() {
        let is_deg = matches!(&items[k], Item::Unit { canonical: "deg", .. });
        if let (true, Item::Unit { canonical: "°c" | "°f" | "k", reach, .. }) = (is_deg, &mut items[k + 1]) {
            *reach = Anywhere;
            items.remove(k);
        } else {
            k += 1;
        }
    }
    // A bound-only unit that does not directly follow a number is its word again.
    for k in 0..items.len() {
        let follows_number = k > 0 && matches!(items[k - 1], Item::Number { .. });
        if let Item::Unit { reach: Bound, fallback, .. } = &items[k] {
            if !follows_number {
                items[k] = (**fallback).clone();
            }
        }
    }
    items
}

/// A word that is not a number or unit: negation, ordinal, relative day, name, code or plain.
fn word(text: &str, lower: &str, initial: bool, call: bool) -> Item {
    if NEGATIONS.contains(&lower) || lower.ends_with("n't") || lower.ends_with("n\u{2019}t") {
        return Item::Negation;
    }
    if let Some(n) = ORDINALS.iter().position(|o| *o == lower) {
        return Item::Key(format!("#{}", n + 1));
    }
    if RELATIVE_DAYS.contains(&lower) {
        return Item::Key(lower.to_string());
    }
    let base = strip_possessive(text);
    let lower_base = base.to_lowercase();
    let is_code = call
        || base.contains('_')
        || (base.chars().any(char::is_alphabetic) && base.chars().any(|c| c.is_ascii_digit()));
    if is_code {
        return Item::Key(lower_base);
    }
    let pronoun = base == "I" || base.starts_with("I'") || base.starts_with("I\u{2019}");
    let letters: Vec<char> = base.chars().filter(|c| c.is_alphabetic()).collect();
    let has_upper = letters.iter().any(|c| c.is_uppercase());
    let all_caps = letters.len() >= 2 && letters.iter().all(|c| c.is_uppercase());
    let inner_upper = base.chars().skip(1).any(char::is_uppercase);
    if !pronoun && has_upper && (!initial || all_caps || inner_upper) {
        return Item::Key(lower_base);
    }
    Item::Plain(lower.to_string())
}

/// `Juliet's` → `Juliet`.
fn strip_possessive(word: &str) -> &str {
    for suffix in ["'s", "'S", "\u{2019}s", "\u{2019}S"] {
        if let Some(base) = word.strip_suffix(suffix) {
            if !base.is_empty() {
                return base;
            }
        }
    }
    word
}

#[cfg(test)]
#[path = "signature_tests.rs"]
mod tests;
