//! The signer against botocore's own signatures (`testdata/clouds/sigv4_vectors.json`, written
//! by `scripts/gen-sigv4-vectors`), HMAC against RFC 4231, dates, and that every input counts.

use serde_json::Value;

use super::hmac::hmac_sha256;
use super::*;

const VECTORS: &str = include_str!("../../../../../testdata/clouds/sigv4_vectors.json");

fn text(v: &Value, key: &str) -> String {
    v[key].as_str().unwrap_or_else(|| panic!("{key} is not a string")).to_owned()
}

fn pairs(v: &Value) -> Vec<(String, String)> {
    let list = v.as_array().expect("pairs");
    list.iter().map(|p| (p[0].as_str().expect("name").to_owned(), p[1].as_str().expect("value").to_owned())).collect()
}

/// Signs one vector with the Rust signer: (canonical request, string to sign, headers).
fn sign_vector(v: &Value) -> (String, String, SignedHeaders) {
    let query = pairs(&v["query"]);
    let headers = pairs(&v["headers"]);
    let query: Vec<(&str, &str)> = query.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
    let headers: Vec<(&str, &str)> = headers.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
    let body = hex::decode(text(v, "body_hex").as_bytes()).expect("body hex");
    let (method, path) = (text(v, "method"), text(v, "path"));
    let request = Request { method: &method, path: &path, query: &query, headers: &headers, body: &body };
    let (akid, secret, region, service) =
        (text(v, "access_key_id"), text(v, "secret_access_key"), text(v, "region"), text(v, "service"));
    let signing = Signing {
        credentials: Credentials {
            access_key_id: &akid,
            secret_access_key: &secret,
            session_token: v["session_token"].as_str(),
        },
        region: &region,
        service: &service,
        date: AmzDate::parse(&text(v, "date")).expect("date"),
        content_sha256_header: v["content_sha256"].as_bool().expect("content_sha256"),
    };
    let canonical = canonical_request(&request, &signing).expect("canonical");
    let to_sign = string_to_sign(&signing, &canonical.request);
    (canonical.request, to_sign, sign(&request, &signing).expect("sign"))
}

#[test]
fn matches_botocore_byte_for_byte() {
    let doc: Value = serde_json::from_str(VECTORS).expect("vectors JSON");
    let vectors = doc["vectors"].as_array().expect("vectors");
    assert!(vectors.len() >= 10);
    for v in vectors {
        let name = text(v, "name");
        let want = &v["expected"];
        let (canonical, to_sign, signed) = sign_vector(v);
        assert_eq!(canonical, text(want, "canonical_request"), "{name}: canonical request");
        assert_eq!(to_sign, text(want, "string_to_sign"), "{name}: string to sign");
        assert_eq!(signed.authorization, text(want, "authorization"), "{name}: authorization");
        assert_eq!(signed.x_amz_date, text(want, "x_amz_date"), "{name}: x-amz-date");
        assert_eq!(signed.x_amz_security_token.as_deref(), want["x_amz_security_token"].as_str(), "{name}");
        let sent_hash = v["content_sha256"].as_bool() == Some(true);
        assert_eq!(signed.x_amz_content_sha256.is_some(), sent_hash, "{name}");
    }
}

fn converse() -> (Vec<(&'static str, &'static str)>, &'static [u8]) {
    let headers = vec![("host", "bedrock-runtime.us-east-1.amazonaws.com"), ("content-type", "application/json")];
    (headers, br#"{"messages":[{"role":"user","content":[{"text":"hi"}]}]}"#)
}

fn signing<'a>(secret: &'a str, date: &str) -> Signing<'a> {
    Signing {
        credentials: Credentials { access_key_id: "AKIDEXAMPLE", secret_access_key: secret, session_token: None },
        region: "us-east-1",
        service: "bedrock",
        date: AmzDate::parse(date).expect("date"),
        content_sha256_header: false,
    }
}

fn signature(path: &str, body: &[u8], signing: &Signing<'_>) -> String {
    let (headers, _) = converse();
    let request = Request { method: "POST", path, query: &[], headers: &headers, body };
    let auth = sign(&request, signing).expect("sign").authorization;
    auth.rsplit_once("Signature=").expect("signature").1.to_owned()
}

#[test]
fn every_input_changes_the_signature() {
    let (_, body) = converse();
    let secret = "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY";
    let path = "/model/anthropic.claude-3-haiku-20240307-v1%3A0/converse";
    let base = signature(path, body, &signing(secret, "20261204T120000Z"));
    assert_eq!(base.len(), 64);
    let others = [
        signature(path, body, &signing("wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEz", "20261204T120000Z")),
        signature(path, b"{\"messages\":[]}", &signing(secret, "20261204T120000Z")),
        signature(path, body, &signing(secret, "20261204T120001Z")),
        signature(path, body, &signing(secret, "20261205T120000Z")),
        signature("/model/anthropic.claude-3-haiku-20240307-v1:0/converse", body, &signing(secret, "20261204T120000Z")),
        signature(path, body, &Signing { region: "us-west-2", ..signing(secret, "20261204T120000Z") }),
    ];
    for (i, other) in others.iter().enumerate() {
        assert_ne!(other, &base, "variant {i}");
    }
}

#[test]
fn session_token_is_signed_and_returned() {
    let (headers, body) = converse();
    let request = Request { method: "POST", path: "/model/m/converse", query: &[], headers: &headers, body };
    let mut with_token = signing("s", "20261204T120000Z");
    with_token.credentials.session_token = Some("TOKEN");
    let signed = sign(&request, &with_token).expect("sign");
    assert!(signed.authorization.contains("SignedHeaders=content-type;host;x-amz-date;x-amz-security-token,"));
    let names: Vec<&str> = signed.pairs().iter().map(|(n, _)| *n).collect();
    assert_eq!(names, ["authorization", "x-amz-date", "x-amz-security-token"]);
}

#[test]
fn caller_copies_of_the_signers_headers_are_ignored() {
    let (mut headers, body) = converse();
    let plain = Request { method: "POST", path: "/m", query: &[], headers: &headers, body };
    let want = sign(&plain, &signing("s", "20261204T120000Z")).expect("sign");
    headers.extend([("Authorization", "Bearer x"), ("X-Amz-Date", "19990101T000000Z"), ("x-amz-security-token", "t")]);
    let forged = Request { method: "POST", path: "/m", query: &[], headers: &headers, body };
    assert_eq!(sign(&forged, &signing("s", "20261204T120000Z")), Ok(want));
}

#[test]
fn bad_inputs_are_refused() {
    let (headers, body) = converse();
    let ok = Request { method: "POST", path: "/m", query: &[], headers: &headers, body };
    let s = signing("s", "20261204T120000Z");
    assert_eq!(sign(&Request { path: "/m?x=1", ..ok }, &s), Err(SigV4Error::PathWithQuery));
    assert_eq!(sign(&Request { path: "m", ..ok }, &s), Err(SigV4Error::PathNotAbsolute));
    assert_eq!(sign(&Request { headers: &headers[1..], ..ok }, &s), Err(SigV4Error::MissingHost));
    let pseudo = [(":authority", "h"), ("host", "h")];
    assert!(matches!(sign(&Request { headers: &pseudo, ..ok }, &s), Err(SigV4Error::InvalidHeaderName(_))));
    assert_eq!(sign(&ok, &Signing { region: "us/east", ..s.clone() }), Err(SigV4Error::InvalidScope("region")));
    let mut bad_token = s.clone();
    bad_token.credentials.session_token = Some("a\r\nb");
    assert_eq!(sign(&ok, &bad_token), Err(SigV4Error::InvalidSessionToken));
    assert_eq!(canonical_uri(""), Ok("/".to_owned()));
}

#[test]
fn hmac_matches_rfc_4231() {
    let cases: [(&[u8], &[u8], &str); 4] = [
        (&[0x0b; 20], b"Hi There", "b0344c61d8db38535ca8afceaf0bf12b881dc200c9833da726e9376c2e32cff7"),
        (b"Jefe", b"what do ya want for nothing?", "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843"),
        (
            &[0xaa; 131],
            b"Test Using Larger Than Block-Size Key - Hash Key First",
            "60e431591ee0b67f0d8a26aacbf5b77f8e0bc6213728c5140546040f0ee37f54",
        ),
        (&[0xaa; 64], &[b'x'; 100], "2dcb15c0c6f608235e51ec30b8384822e008f8fe1a2d1783eba3aad8305856db"),
    ];
    for (key, data, want) in cases {
        assert_eq!(hex::encode(&hmac_sha256(key, &[data])), want, "key of {} bytes", key.len());
        let (a, b) = data.split_at(data.len() / 2);
        assert_eq!(hex::encode(&hmac_sha256(key, &[a, b])), want, "split message");
    }
}

#[test]
fn dates_from_unix_seconds_and_text() {
    for (secs, text) in [
        (0, "19700101T000000Z"),
        (951_868_800, "20000301T000000Z"),
        (1_796_385_600, "20261204T120000Z"),
        (1_835_481_599, "20280229T235959Z"),
        (253_402_300_799, "99991231T235959Z"),
    ] {
        let date = AmzDate::from_unix_seconds(secs).expect("in range");
        assert_eq!((date.as_str(), date.day()), (text, &text[..8]));
        assert_eq!(AmzDate::parse(text), Ok(date));
    }
    assert_eq!(AmzDate::from_unix_seconds(253_402_300_800), Err(SigV4Error::InvalidDate));
    assert_eq!(AmzDate::from_unix_seconds(u64::MAX), Err(SigV4Error::InvalidDate));
    for bad in ["", "20261204T120000", "20261204 120000Z", "20261304T120000Z", "20261204T240000Z", "2026120AT120000Z"] {
        assert_eq!(AmzDate::parse(bad), Err(SigV4Error::InvalidDate), "{bad:?}");
    }
}

#[test]
fn secrets_stay_out_of_debug_output() {
    let c = Credentials { access_key_id: "AKID", secret_access_key: "SECRET", session_token: Some("TOKEN") };
    let shown = format!("{c:?}");
    assert!(shown.contains("AKID") && !shown.contains("SECRET") && !shown.contains("TOKEN"), "{shown}");
}

/// `cargo test --release -p ferrogate-core sigv4_cost -- --ignored --nocapture`: one signature of
/// a 2 KiB body (canonical request, 5 HMACs, 2 SHA-256 of the canonical request and body).
#[test]
#[ignore]
fn sigv4_cost() {
    let body = vec![b'x'; 2048];
    let (headers, _) = converse();
    let request =
        Request { method: "POST", path: "/model/a.b-v1%3A0/converse", query: &[], headers: &headers, body: &body };
    let mut s = signing("wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY", "20261204T120000Z");
    s.credentials.session_token = Some("FwoGZXIvYXdzEJr//////////wEaDM3Jc2Vzc2lvbnRva2Vu");
    let rounds = 20_000u32;
    let start = std::time::Instant::now();
    let mut total = 0usize;
    for _ in 0..rounds {
        total += std::hint::black_box(sign(std::hint::black_box(&request), &s)).map_or(0, |h| h.authorization.len());
    }
    let ns = start.elapsed().as_nanos() / u128::from(rounds);
    println!("sigv4: {ns} ns per signature (2 KiB body, {rounds} rounds, {total} bytes)");
}
