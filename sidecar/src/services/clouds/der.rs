//! The RSA key of a Google service-account key file in the form the JWT signer takes: the
//! file holds a PKCS#8 PEM (`-----BEGIN PRIVATE KEY-----`), the signer a PKCS#1 DER. PKCS#8
//! only wraps PKCS#1 (RFC 5208: a sequence of a version, the algorithm and the key as an
//! octet string), so a few checked DER reads unwrap it; the key itself is checked when it
//! first signs. Errors never quote key material.

use base64::engine::general_purpose::STANDARD;
use base64::Engine as _;

/// The DER of the object identifier `rsaEncryption` (1.2.840.113549.1.1.1).
const RSA_ENCRYPTION: [u8; 9] = [0x2a, 0x86, 0x48, 0x86, 0xf7, 0x0d, 0x01, 0x01, 0x01];

/// The PKCS#1 DER of the RSA private key in `pem` (PKCS#8 `PRIVATE KEY`, or already PKCS#1
/// `RSA PRIVATE KEY`).
pub fn rsa_private_key(pem: &str) -> Result<Vec<u8>, String> {
    let (label, der) = pem_block(pem)?;
    match label {
        "RSA PRIVATE KEY" => Ok(der),
        "PRIVATE KEY" => pkcs8_rsa(&der).map(<[u8]>::to_vec),
        other => Err(format!("a PEM {other:?} block is not a private key")),
    }
}

/// The label and decoded body of the first PEM block of `pem`.
fn pem_block(pem: &str) -> Result<(&str, Vec<u8>), String> {
    let start = pem.find("-----BEGIN ").ok_or("no PEM block (-----BEGIN ...-----)")?;
    let after = &pem[start + "-----BEGIN ".len()..];
    let label_end = after.find("-----").ok_or("malformed PEM header")?;
    let label = &after[..label_end];
    let body = &after[label_end + "-----".len()..];
    let end = body.find(&format!("-----END {label}-----")).ok_or_else(|| format!("no -----END {label}----- line"))?;
    let b64: String = body[..end].chars().filter(|c| !c.is_ascii_whitespace()).collect();
    let der = STANDARD.decode(b64).map_err(|_| "the PEM body is not base64".to_string())?;
    Ok((label, der))
}

/// The PKCS#1 key inside a PKCS#8 `PrivateKeyInfo`, when its algorithm is RSA.
fn pkcs8_rsa(der: &[u8]) -> Result<&[u8], String> {
    let (info, _) = element(der, 0x30)?;
    let (_version, rest) = element(info, 0x02)?;
    let (algorithm, rest) = element(rest, 0x30)?;
    let (oid, _) = element(algorithm, 0x06)?;
    if oid != RSA_ENCRYPTION {
        return Err("the private key is not an RSA key (service accounts sign with RS256)".into());
    }
    let (key, _) = element(rest, 0x04)?;
    Ok(key)
}

/// The content of the DER element with `tag` at the start of `input`, and what follows it.
fn element(input: &[u8], tag: u8) -> Result<(&[u8], &[u8]), String> {
    let truncated = || "the key's DER is truncated".to_string();
    let (&found, rest) = input.split_first().ok_or_else(truncated)?;
    if found != tag {
        return Err(format!("the key's DER has tag {found:#04x} where {tag:#04x} was expected"));
    }
    let (&first, rest) = rest.split_first().ok_or_else(truncated)?;
    let (len, rest) = if first < 0x80 {
        (usize::from(first), rest)
    } else {
        let n = usize::from(first & 0x7f);
        if n == 0 || n > 4 {
            return Err("the key's DER has an unsupported length".into());
        }
        let (bytes, rest) = rest.split_at_checked(n).ok_or_else(truncated)?;
        (bytes.iter().fold(0usize, |len, b| len << 8 | usize::from(*b)), rest)
    };
    rest.split_at_checked(len).ok_or_else(truncated)
}
