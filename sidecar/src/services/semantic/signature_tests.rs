use super::*;

/// Every text of `same` has one signature, and each of `other` another one.
#[track_caller]
fn keeps_and_breaks(same: &[&str], other: &[&str]) {
    let first = tokens(same[0]);
    for text in &same[1..] {
        assert_eq!(tokens(text), first, "{text:?} should keep the signature of {:?}", same[0]);
        assert_eq!(signature(text), first.signature());
    }
    for text in other {
        let t = tokens(text);
        assert_ne!(t, first, "{text:?} should break the signature of {:?}", same[0]);
        assert_ne!(t.signature(), first.signature());
    }
}

fn ordered(text: &str) -> Vec<String> {
    tokens(text).ordered
}

fn units(text: &str) -> Vec<String> {
    tokens(text).units
}

#[test]
fn numbers_are_normalized() {
    assert_eq!(
        ordered("Is 5.0 more, or 05, or 1,000.50, or -3, or .5?"),
        ["5", "05", "1000.5", "-3", "0.5"].map(|s| s.replace("05", "5"))
    );
    keeps_and_breaks(
        &["Is 97 a prime number?", "Is 97.0 prime?"],
        &["Is 91 a prime number?", "Is 9.7 a prime number?"],
    );
    keeps_and_breaks(&["What happened in 1914?", "What happened in the year 1914?"], &["What happened in 1945?"]);
    // A range is two numbers, a leading minus a sign.
    assert_eq!(ordered("pages 1-5"), ["1", "5"]);
    keeps_and_breaks(&["Is -5 below zero?"], &["Is 5 below zero?"]);
}

#[test]
fn number_words_are_numbers() {
    keeps_and_breaks(
        &["Give me three tips for better sleep.", "Give me 3 tips for sleeping better."],
        &["Give me five tips for better sleep.", "Give me 30 tips for better sleep."],
    );
    keeps_and_breaks(
        &["Book a table for two at 7 pm.", "Book a table for 2 at seven pm."],
        &["Book a table for four at 7 pm."],
    );
    assert_eq!(
        ordered("twenty-five, two hundred fifty, a hundred, three thousand and ten"),
        ["25", "250", "100", "3000", "10"]
    );
    // "one" alone is as often a pronoun: not a number.
    assert_eq!(ordered("Which one is better?"), Vec::<String>::new());
    assert_eq!(ordered("one hundred"), ["100"]);
}

#[test]
fn ordinals_are_numbers_too() {
    keeps_and_breaks(
        &["Who was the first president of the United States?", "Who was the 1st president of the United States?"],
        &["Who was the second president of the United States?", "Who was the 2nd president of the United States?"],
    );
    assert_eq!(ordered("the 22nd and the twelfth"), ["#22", "#12"]);
    // "second" after a number is time.
    assert_eq!(units("wait 2 seconds, or 1 second"), ["1 s", "2 s"]);
}

#[test]
fn relative_days_are_kept() {
    keeps_and_breaks(
        &["What's the weather like in Vienna today?", "How is the weather in Vienna today?"],
        &["What's the weather like in Vienna tomorrow?", "What's the weather like in Vienna?"],
    );
}

#[test]
fn units_bind_numbers_so_conversions_keep_their_direction() {
    keeps_and_breaks(
        &["Convert 5 kilometers to miles.", "How many miles is 5 km?", "Convert 5km to mi.", "5 KM in miles, please."],
        &["Convert 5 miles to kilometers.", "Convert 5 km to feet.", "Convert 6 km to miles."],
    );
    assert_eq!(units("Convert 5 kilometers to miles."), ["5 km", "mi"]);
    keeps_and_breaks(
        &[
            "Convert 100 degrees Fahrenheit to Celsius.",
            "Convert 100 °F to °C.",
            "What is 100°F in Celsius?",
            "100° F in degrees C?",
        ],
        &["Convert 100 degrees Celsius to Fahrenheit.", "Convert 100 °C to °F."],
    );
    keeps_and_breaks(
        &["Convert 10 USD to EUR.", "Convert 10 dollars to euros.", "What is $10 in €?"],
        &["Convert 10 EUR to USD.", "Convert 10 euros to dollars.", "What is €10 in $?"],
    );
    // One word may stand between a number and its unit, not a preposition.
    assert_eq!(units("Convert 10 US dollars to euros."), ["10 usd", "eur"]);
    assert_eq!(units("5 square miles"), ["5 mi"]);
    assert_eq!(units("Convert 5 to miles."), ["mi"]);
    keeps_and_breaks(
        &["How many grams are in a kilogram?", "How many grams does a kilogram have?"],
        &["How many grams are in a pound?"],
    );
    keeps_and_breaks(
        &["What is 15% of 200?", "What's 15 percent of 200?"],
        &["What is 25% of 200?", "What is 15 % of 300?"],
    );
}

#[test]
fn short_symbols_and_time_units_count_only_after_a_number() {
    keeps_and_breaks(
        &["Refunds within 30 days?", "Refunds within 30 days, is that right?"],
        &["Refunds within 30 months?"],
    );
    // Ordinary words otherwise: "what year", "business hours", a musical "g".
    keeps_and_breaks(&["When was the Eiffel Tower built?", "In what year was the Eiffel Tower built?"], &[]);
    keeps_and_breaks(
        &["What are the business hours of your support team?", "What are your support team's business hours?"],
        &[],
    );
    assert_eq!(units("a g chord, 5 g of salt"), ["5 g"]);
    // A capital letter that is not a unit there is a name.
    keeps_and_breaks(&["Is vitamin C good for colds?"], &["Is vitamin D good for colds?"]);
}

#[test]
fn names_are_capitalized_words_not_starting_a_sentence() {
    keeps_and_breaks(
        &["What is the capital of Austria?", "What's the capital city of Austria?", "capital of Austria??"],
        &["What is the capital of Australia?", "What is the capital of austria?"],
    );
    // In order: the direction of a trip.
    keeps_and_breaks(
        &["Show me flights from Paris to London on March 3.", "Show flights from Paris to London for March 3."],
        &["Show me flights from London to Paris on March 3."],
    );
    // A sentence's first word is not a name, unless written in capitals or mixed case; the
    // pronoun I never is.
    assert_eq!(
        ordered("Explain TCP. What is JavaScript? How do I use iPhone apps? My Docker broke."),
        ["tcp", "javascript", "iphone", "docker"]
    );
    keeps_and_breaks(
        &["How do I reset my password?", "How to reset my password?", "I'm locked out. Reset my password?"],
        &[],
    );
    // A possessive is the name.
    keeps_and_breaks(
        &["Summarize the plot of Romeo and Juliet.", "Summarize Romeo and Juliet's plot."],
        &["Summarize the plot of Romeo and Juliet II."],
    );
    keeps_and_breaks(&["Explain the causes of World War I."], &["Explain the causes of World War II."]);
}

#[test]
fn code_words_are_kept() {
    keeps_and_breaks(&["What does len() return?", "What is returned by len()?"], &["What does max() return?"]);
    keeps_and_breaks(
        &["What is the derivative of sin(x)?", "Derivative of sin(x)?"],
        &["What is the derivative of cos(x)?"],
    );
    assert_eq!(ordered("call my_func with utf8 and mp3 files"), ["my_func", "utf8", "mp3"]);
}

#[test]
fn the_word_compared_is_kept() {
    keeps_and_breaks(
        &["Select users older than 30.", "Select the users that are older than 30."],
        &["Select users younger than 30.", "Select users older than 40."],
    );
}

#[test]
fn negation_is_a_flag() {
    keeps_and_breaks(
        &["My package was not delivered.", "My package wasn't delivered.", "My package never got delivered."],
        &["My package was delivered."],
    );
    keeps_and_breaks(
        &["Is it safe to take ibuprofen without food?", "Can I take ibuprofen with no food?"],
        &["Is it safe to take ibuprofen with food?"],
    );
    assert!(tokens("I can’t log in").negated);
    assert!(tokens("This cannot be").negated);
    assert!(!tokens("Is it known?").negated);
}

#[test]
fn bounded_and_deterministic() {
    let long = "Paris 12 km ".repeat(10_000);
    let t = tokens(&long);
    assert_eq!(t.ordered.len(), MAX_ORDERED);
    assert!(t.units.len() <= MAX_UNITS);
    let word = "A".repeat(100);
    assert_eq!(ordered(&format!("see {word}"))[0].len(), MAX_TOKEN_CHARS);
    // Cut at a character boundary, whatever the text.
    let multibyte = "é".repeat(MAX_SCAN_BYTES);
    assert_eq!(tokens(&multibyte), Tokens::default());
    // The same text, the same signature, always; an empty text has one too.
    assert_eq!(signature("Convert 5 km to miles."), signature("Convert 5 km to miles."));
    assert_eq!(signature(""), Tokens::default().signature());
    // Fields are separated: a token moved from one field to another changes the signature.
    let a = Tokens { ordered: vec!["km".into()], units: vec![], negated: false };
    let b = Tokens { ordered: vec![], units: vec!["km".into()], negated: false };
    assert_ne!(a.signature(), b.signature());
}

#[test]
fn ordinary_words_do_not_count() {
    // What the guard cannot catch: lowercase words (cosine alone decides there).
    keeps_and_breaks(
        &["How do I enable two-factor authentication?", "How do I disable two-factor authentication?"],
        &[],
    );
    keeps_and_breaks(&["Sort a list in ascending order.", "Sort a list in descending order."], &[]);
}
