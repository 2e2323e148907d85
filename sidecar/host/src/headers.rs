//! Ordered HTTP header list as the host keeps it: lower-cased keys, pseudo-headers first,
//! raw byte values. This is the shape Envoy hands a filter and what the ABI serializes.

/// Ordered header list, keys lower-cased, pseudo-headers (":method", ":path", ":authority",
/// ":scheme", ":status") first. Values are raw bytes.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Headers(pub Vec<(String, Vec<u8>)>);

impl Headers {
    /// An empty header list.
    pub fn new() -> Self {
        Self(Vec::new())
    }

    /// Builds a list from pairs, lower-casing keys and moving pseudo-headers to the front
    /// (Envoy's iteration order) while keeping the relative order otherwise.
    pub fn from_pairs<K: AsRef<str>, V: AsRef<[u8]>>(pairs: impl IntoIterator<Item = (K, V)>) -> Self {
        let mut out = Self::new();
        for (k, v) in pairs {
            out.add(k.as_ref(), v.as_ref().to_vec());
        }
        out
    }

    /// First value of `name` (case-insensitive).
    pub fn get(&self, name: &str) -> Option<&[u8]> {
        // Stored keys are lower-case: compare without making a lower-case copy of `name`.
        self.0.iter().find(|(k, _)| k.eq_ignore_ascii_case(name)).map(|(_, v)| v.as_slice())
    }

    /// First value of `name` if it is valid UTF-8.
    pub fn get_str(&self, name: &str) -> Option<&str> {
        self.get(name).and_then(|v| std::str::from_utf8(v).ok())
    }

    /// Appends another entry (pseudo-headers go after the existing pseudo-headers).
    pub fn add(&mut self, name: &str, value: impl Into<Vec<u8>>) {
        self.add_lowercase(name.to_ascii_lowercase(), value.into());
    }

    /// [`Headers::add`] for a name the caller already lower-cased (the hostcalls do), without
    /// another copy.
    pub(crate) fn add_lowercase(&mut self, name: String, value: Vec<u8>) {
        let entry = (name, value);
        if entry.0.starts_with(':') {
            let at = self.0.iter().take_while(|(k, _)| k.starts_with(':')).count();
            self.0.insert(at, entry);
        } else {
            self.0.push(entry);
        }
    }

    /// Replaces every entry of `name` by one entry with `value`.
    pub fn set(&mut self, name: &str, value: impl Into<Vec<u8>>) {
        self.set_lowercase(name.to_ascii_lowercase(), value.into());
    }

    /// [`Headers::set`] for a name the caller already lower-cased.
    pub(crate) fn set_lowercase(&mut self, name: String, value: Vec<u8>) {
        self.remove(&name);
        self.add_lowercase(name, value);
    }

    /// Removes every entry of `name` (no-op when absent).
    pub fn remove(&mut self, name: &str) {
        self.0.retain(|(k, _)| !k.eq_ignore_ascii_case(name));
    }

    /// The list as one buffer (the ABI's pairs serialization): a copy kept for later that
    /// costs one allocation instead of one per name and value. [`Headers::unpack`] restores it.
    pub fn pack(&self) -> Vec<u8> {
        crate::codec::serialize_headers(self)
    }

    /// A list [`pack`](Self::pack)ed before; `None` for bytes that are not one.
    pub fn unpack(bytes: &[u8]) -> Option<Headers> {
        crate::codec::deserialize_headers(bytes)
    }

    /// Iterates over all entries in order.
    pub fn iter(&self) -> impl Iterator<Item = (&str, &[u8])> + Clone {
        self.0.iter().map(|(k, v)| (k.as_str(), v.as_slice()))
    }

    /// Number of entries (each repeated value counts).
    pub fn len(&self) -> usize {
        self.0.len()
    }

    /// Whether there are no entries.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// Envoy's `get_header_map_size`: bytes of all keys and values.
    pub(crate) fn byte_size(&self) -> usize {
        self.0.iter().map(|(k, v)| k.len() + v.len()).sum()
    }

    /// All values of `name` joined with "," (CEL `request.headers.<name>`).
    pub(crate) fn joined(&self, name: &str) -> Option<Vec<u8>> {
        let values: Vec<&[u8]> = self.0.iter().filter(|(k, _)| k == name).map(|(_, v)| v.as_slice()).collect();
        (!values.is_empty()).then(|| values.join(&b","[..]))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_lowercased_and_pseudo_first() {
        let h = Headers::from_pairs([("X-A", "1"), (":Path", "/"), ("x-a", "2")]);
        assert_eq!(h.0[0].0, ":path");
        assert_eq!(h.get("X-A"), Some(&b"1"[..]));
        assert_eq!(h.joined("x-a"), Some(b"1,2".to_vec()));
        let mut h = h;
        h.set("x-a", "3");
        assert_eq!(h.len(), 2);
        h.remove("X-A");
        assert_eq!(h.len(), 1);
    }

    #[test]
    fn pack_and_unpack_keep_order_repeats_and_raw_bytes() {
        let mut h = Headers::from_pairs([(":method", "POST"), ("x-a", "1"), ("x-a", "2")]);
        h.add("x-raw", vec![0xff, 0x00, b'v']);
        assert_eq!(Headers::unpack(&h.pack()), Some(h));
        assert_eq!(Headers::unpack(&[1, 0]), None);
    }
}
