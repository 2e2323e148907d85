//! Multipart tests: the fixtures in `testdata/multipart/`, content types, framing errors.

use super::*;

fn fixture(name: &str) -> Vec<u8> {
    let path = format!("{}/../../testdata/multipart/{name}", env!("CARGO_MANIFEST_DIR"));
    std::fs::read(&path).unwrap_or_else(|e| panic!("{path}: {e}"))
}

const B1: &[u8] = b"----WebKitFormBoundary7MA4YWxkTrZu0gW";
const B2: &[u8] = b"------------------------d74496d66958873e";

#[test]
fn boundary_from_content_type() {
    assert_eq!(boundary(b"multipart/form-data; boundary=abc"), Some(b"abc".as_slice()));
    assert_eq!(boundary(b"Multipart/Form-Data;charset=utf-8; BOUNDARY=\"a;b c\""), Some(b"a;b c".as_slice()));
    assert_eq!(boundary(b"multipart/form-data"), None);
    assert_eq!(boundary(b"multipart/form-data; boundary="), None);
    assert_eq!(boundary(b"application/json; boundary=abc"), None);
    assert_eq!(boundary(format!("multipart/form-data; boundary={}", "x".repeat(71)).as_bytes()), None);
}

#[test]
fn model_first_then_file() {
    let body = fixture("transcription-model-first.bin");
    let span = find_model(&body, B1).unwrap();
    assert_eq!(&body[span.clone()], b"whisper-1");
    let out = rewrite_model(&body, span.clone(), b"Systran/faster-whisper-large-v3");
    assert_eq!(out.len(), body.len() - 9 + 31);
    assert_eq!(&out[..span.start], &body[..span.start]);
    assert_eq!(&out[span.start + 31..], &body[span.end..]);
    let again = find_model(&out, B1).unwrap();
    assert_eq!(&out[again], b"Systran/faster-whisper-large-v3");
}

#[test]
fn file_first_with_boundary_like_bytes_then_model() {
    let body = fixture("translation-model-last.bin");
    let span = find_model(&body, B2).unwrap();
    assert_eq!(&body[span.clone()], b"gpt-4o-transcribe");
    let out = rewrite_model(&body, span, b"whisper-1");
    assert_eq!(&out[find_model(&out, B2).unwrap()], b"whisper-1");
    // The file part kept every byte, lookalike delimiters included.
    let file = parts(&body, B2).unwrap().remove(0).content;
    assert!(body[file].ends_with(b"X\r\n\r\n-------------------------d74496d66958873e\x00\xff"));
}

fn form(fields: &[(&str, &str)]) -> Vec<u8> {
    let mut b = Vec::new();
    for (name, value) in fields {
        b.extend_from_slice(
            format!("--xyz\r\nContent-Disposition: form-data; name=\"{name}\"\r\n\r\n{value}\r\n").as_bytes(),
        );
    }
    b.extend_from_slice(b"--xyz--");
    b
}

#[test]
fn missing_duplicate_and_empty_values() {
    assert_eq!(find_model(&form(&[("file", "x")]), b"xyz"), Err(MultipartError::ModelMissing));
    assert_eq!(find_model(&form(&[("model", "a"), ("model", "b")]), b"xyz"), Err(MultipartError::DuplicateModel));
    let body = form(&[("model", "")]);
    let span = find_model(&body, b"xyz").unwrap();
    assert!(span.is_empty());
    assert_eq!(rewrite_model(&body, span, b"m"), form(&[("model", "m")]));
    // Field names are compared exactly: `models` and `model_name` are other fields.
    assert_eq!(find_model(&form(&[("models", "a"), ("model_name", "b")]), b"xyz"), Err(MultipartError::ModelMissing));
}

#[test]
fn malformed_bodies_are_errors_not_panics() {
    let full = form(&[("model", "a"), ("file", "bytes")]);
    for cut in 0..full.len() {
        // Every truncation is either an error or (once the closing delimiter is complete) fine.
        let r = find_model(&full[..cut], b"xyz");
        assert!(r.is_err() || cut >= full.len() - 2, "cut {cut}: {r:?}");
    }
    assert!(matches!(find_model(b"no boundary here", b"xyz"), Err(MultipartError::Malformed(_))));
    assert!(matches!(
        find_model(b"--xyz\r\nContent-Disposition: form-data; name=model", b"xyz"),
        Err(MultipartError::Malformed(_))
    ));
    assert!(matches!(find_model(&full, b""), Err(MultipartError::Malformed(_))));
    assert_eq!(rewrite_model(b"abc", 2..10, b"Z"), b"abZ");
}

#[test]
fn part_without_headers_and_lf_header_lines() {
    let body = b"--b\r\n\r\nanonymous\r\n--b\nContent-Disposition: form-data; name=model\n\nm1\r\n--b--";
    assert_eq!(&body[find_model(body, b"b").unwrap()], b"m1");
}
