use super::*;

fn seal(id: &str) -> Option<String> {
    Some(format!("{id}.t"))
}

#[test]
fn events_are_rewritten_by_type_and_the_rest_kept() {
    let body = b": ping\r\n\r\nevent: endpoint\r\ndata: /messages/?session_id=ab\r\n\r\nevent: message\ndata: {}\n\n";
    let mut seen = Vec::new();
    let out = map_events::<SseError>(body, &mut |kind, data| {
        seen.push((kind.map(<[u8]>::to_vec), data.to_vec()));
        Ok((kind == Some(b"endpoint")).then(|| b"/x".to_vec()))
    })
    .unwrap()
    .unwrap();
    assert_eq!(out, b": ping\r\n\r\nevent: endpoint\r\ndata: /x\r\n\r\nevent: message\ndata: {}\n\n");
    assert_eq!(seen.len(), 2, "the comment-only event has blank data and is not offered");
    assert_eq!(map_events::<SseError>(body, &mut |_, _| Ok(None)).unwrap(), None);
}

#[test]
fn the_splitter_hands_out_whole_events_only() {
    let stream = b"event: endpoint\r\ndata: /m?session_id=1\r\n\r\nevent: message\ndata: {\"a\":1}\n\n";
    // Every cut point, including one between the \r and \n of a line ending.
    for cut in 0..=stream.len() {
        let mut s = EventSplitter::default();
        let mut out = s.push(&stream[..cut], 1 << 20).unwrap();
        out.extend(s.push(&stream[cut..], 1 << 20).unwrap());
        assert_eq!(out, stream, "cut at {cut}");
        assert!(s.finish().is_empty());
    }
    let mut s = EventSplitter::default();
    assert_eq!(s.push(b"data: 1\n\ndata: 2\r", 100).unwrap(), b"data: 1\n\n");
    assert_eq!(s.push(b"\n\r", 100).unwrap(), b"");
    assert_eq!(s.push(b"\n", 100).unwrap(), b"data: 2\r\n\r\n");
    assert_eq!(s.push(b"data: unterminated", 100).unwrap(), b"");
    assert_eq!(s.finish(), b"data: unterminated");
    assert_eq!(EventSplitter::default().push(&[b'x'; 11], 10), Err(SseError::TooLarge(10)));
}

#[test]
fn the_endpoint_moves_under_the_gateway_with_its_session_sealed() {
    let ep = |data: &str| gateway_endpoint("old", data.as_bytes(), &seal);
    assert_eq!(ep("/messages/?session_id=ab12").unwrap(), "/mcp/old/messages/?session_id=ab12.t");
    assert_eq!(
        ep("http://10.0.0.1:8000/p/messages/?x=1&session_id=ab").unwrap(),
        "/mcp/old/p/messages/?x=1&session_id=ab.t"
    );
    assert_eq!(ep("/messages/").unwrap(), "/mcp/old/messages/");
    for bad in ["messages/", "//evil.example/m", "ftp://h/m", "https://h", "\u{0}"] {
        assert_eq!(ep(bad), Err(SseError::Endpoint), "{bad:?}");
    }
    assert_eq!(gateway_endpoint("old", b"/m?session_id=x", &|_| None), Err(SseError::Endpoint));
}

#[test]
fn a_query_session_is_opened_and_the_rest_kept() {
    let open = |id: &str| id.strip_suffix(".t").map(str::to_string).ok_or("foreign");
    assert_eq!(open_query("session_id=ab.t&x=1", &open), Ok(Some("session_id=ab&x=1".to_string())));
    assert_eq!(open_query("x=1", &open), Ok(None));
    assert_eq!(open_query("session_id=ab", &open), Err("foreign"));
}
