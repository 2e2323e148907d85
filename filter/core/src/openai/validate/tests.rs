//! The validator against `from_utf8` and serde_json (`IgnoredAny`): the same verdict on
//! hand-picked edge cases and on generated near-JSON.

use super::validate;

fn serde_ok(b: &[u8]) -> bool {
    std::str::from_utf8(b).is_ok() && serde_json::from_slice::<serde::de::IgnoredAny>(b).is_ok()
}

fn same(b: &[u8]) {
    assert_eq!(validate(b).is_ok(), serde_ok(b), "{:?}", String::from_utf8_lossy(b));
}

#[test]
fn edge_cases_match_serde() {
    let cases: &[&[u8]] = &[
        b"{}",
        b"[]",
        b" {} ",
        b"{",
        b"}",
        b"",
        b" ",
        b"{}x",
        b"{} {}",
        b"null",
        b"tru",
        b"truex",
        b"1",
        b"-",
        b"-0",
        b"01",
        b"1.",
        b"1.5",
        b".5",
        b"1e",
        b"1e+",
        b"1E-5",
        b"-1.5e3",
        b"+1",
        b"0x1",
        b"\"a\"",
        b"\"a",
        b"\"\\q\"",
        b"\"\\u12\"",
        b"\"\\u12g4\"",
        b"\"\\uD800\"",
        b"\"\\/\\b\\f\\n\\r\\t\\\"\\\\\"",
        b"\"\x01\"",
        b"\"\x1f\"",
        b"\"\x7f\"",
        br#"{"a":1,}"#,
        br#"{"a":1,,"b":2}"#,
        br#"{,"a":1}"#,
        br#"{"a" 1}"#,
        br#"{"a":}"#,
        br#"{1:2}"#,
        br#"[1,]"#,
        br#"[,1]"#,
        br#"[1 2]"#,
        br#"{"a":[1,{"b":null}],"c":"d"}"#,
        br#"{"a":1}}"#,
        br#"[1]]"#,
        br#"{"a":1]"#,
        br#"[1}"#,
        b"\t\n\r {\"a\"\t:\n1\r}\n",
        b"\x0c{}",
        b"[1,2,3,[4,[5,[6]]]]",
        br#"{"model":"m","messages":[]}"#,
        // UTF-8, checked string by string.
        b"\"\xc3\xa9\"",
        b"\"a\xe2\x82\xacb\\n\xf0\x9f\x98\x80\"",
        b"{\"\xc3\xa9\":\"\xe6\xa8\xa1\"}",
        b"\"\xff\"",
        b"\"\xc3\"",
        b"\"\xc3\\n\"",
        b"\"\xe2\x82\"",
        b"\"\xc0\x80\"",
        b"\"\xed\xa0\x80\"",
        b"\"\xf4\x90\x80\x80\"",
        b"\xef\xbb\xbf{}",
        b"[\xc3\xa9]",
        b"\"\xc3\xa9",
    ];
    for case in cases {
        same(case);
    }
}

#[test]
fn deep_nesting_matches_serde() {
    // serde ignores values iteratively, without its parser's recursion limit.
    for depth in [63, 64, 65, 127, 128, 129, 300, 20_000] {
        same(format!("{}{}", "[".repeat(depth), "]".repeat(depth)).as_bytes());
        same(format!("{}1{}", "[".repeat(depth), "]".repeat(depth)).as_bytes());
        let objects = format!("{}1{}", r#"{"a":"#.repeat(depth), "}".repeat(depth));
        same(objects.as_bytes());
        let mixed = format!("{}1{}", r#"[{"a":"#.repeat(depth), "}]".repeat(depth));
        same(mixed.as_bytes());
        same(format!("{}1{}", r#"[{"a":"#.repeat(depth), "]}".repeat(depth)).as_bytes());
    }
}

/// `count` generated bodies of 1 to 12 JSON-ish parts (valid or nearly), the same every run.
pub(crate) fn near_json(count: usize) -> impl Iterator<Item = Vec<u8>> {
    const PARTS: [&[u8]; 30] = [
        b"{",
        b"}",
        b"[",
        b"]",
        b",",
        b":",
        b"\"k\"",
        b"\"model\"",
        b"\"m\\u0041\"",
        b"\"v\\n\"",
        b"\"\\x\"",
        b"1",
        b"-0.5e+2",
        b"01",
        b"1.",
        b"true",
        b"nul",
        b"null",
        b" ",
        b"\n",
        b"\"",
        b"\\",
        b"e",
        b"0",
        b"\"\x01\"",
        b"-",
        b"\"\xc3\xa9\"",
        b"\xc3",
        b"\xa9",
        b"\xff",
    ];
    let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
    let mut next = move || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    };
    (0..count).map(move |_| {
        let n = 1 + next() % 12;
        (0..n).flat_map(|_| PARTS[(next() % PARTS.len() as u64) as usize].iter().copied()).collect()
    })
}

#[test]
fn generated_near_json_matches_serde() {
    let mut valid = 0;
    for body in near_json(200_000) {
        same(&body);
        valid += usize::from(serde_ok(&body));
    }
    assert!(valid > 1_000, "{valid}");
}

#[test]
fn errors_say_where() {
    let body = b"{\n  \"a\": tru\n}";
    let e = validate(body).unwrap_err();
    assert_eq!(e.describe(body), "expected ident at line 2 column 8");
}
