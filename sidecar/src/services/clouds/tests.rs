//! Sources, `expand`, schedules, and the parsers (STS XML, OAuth JSON, PEM keys, environment
//! keys) without the network.

use std::collections::HashMap;
use std::time::Duration;

use ferrogate_core::clouds::xml;
use ferrogate_core::config::cloud::RawAwsKeys;
use reqwest::StatusCode;

use super::refresh::{backoff, refresh_in};
use super::*;

pub(super) const CONFIG: &str = r#"
providers:
  - { name: claude, kind: bedrock, region: eu-west-1, credentials: { source: aws_web_identity, role_arn: "arn:aws:iam::123456789012:role/gw" } }
  - { name: gemini, kind: vertex, project: my-project-1, region: us-central1, credentials: { source: gcp_metadata } }
  - { name: gpt, kind: azure_openai, base_url: "https://res.openai.azure.com", credentials: { source: azure_client_credentials, tenant_id: t1, client_id: c1, client_secret_env: AZ_SECRET } }
  - { name: local, kind: openai_compatible, base_url: "http://127.0.0.1:8000", api_key_env: LOCAL_KEY }
models: []
"#;

pub(super) fn raw(yaml: &str) -> RawConfig {
    serde_saphyr::from_str(yaml).unwrap()
}

/// A fetcher whose environment is `vars`.
pub(super) fn fetcher(vars: &[(&str, &str)]) -> Fetcher {
    let vars: HashMap<String, String> = vars.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
    Fetcher::new(refresh::client(), Arc::new(move |name: &str| vars.get(name).cloned()))
}

fn keys(id: &str) -> RawAwsKeys {
    RawAwsKeys {
        access_key_id: id.into(),
        secret_access_key: "secret".into(),
        session_token: Some("token".into()),
        expires_at: Some(2_000),
    }
}

fn source_of(raw: &RawConfig, name: &str) -> Source {
    sources(raw).into_iter().find(|(n, _)| n == name).unwrap().1
}

#[test]
fn sources_are_the_providers_with_a_credentials_block() {
    let raw = raw(CONFIG);
    let found = sources(&raw);
    let names: Vec<(&str, SourceKind)> = found.iter().map(|(n, s)| (n.as_str(), s.kind)).collect();
    assert_eq!(
        names,
        [
            ("claude", SourceKind::AwsWebIdentity),
            ("gemini", SourceKind::GcpMetadata),
            ("gpt", SourceKind::AzureClientCredentials)
        ]
    );
    assert_eq!(found[0].1.region.as_deref(), Some("eu-west-1"), "STS is regional");
    for kind in ["aws_env", "aws_web_identity", "gcp_service_account", "gcp_metadata", "azure_client_credentials"] {
        assert_eq!(SourceKind::parse(kind).map(SourceKind::as_str), Some(kind));
    }
    assert_eq!(SourceKind::parse("aws_sso"), None, "unknown sources are validation's to report");
}

#[test]
fn expand_fills_aws_keys_or_the_api_key_by_source() {
    let raw = raw(CONFIG);
    let mut minted = MintedMap::new();
    let put = |minted: &mut MintedMap, name: &str, credential: Credential, expires_at: Option<u64>| {
        minted.insert(name.into(), Minted { source: source_of(&raw, name), credential, expires_at });
    };
    put(&mut minted, "claude", Credential::Aws(keys("ASIA1")), Some(2_000));
    put(&mut minted, "gemini", Credential::Bearer("ya29.tok".into()), Some(2_000));
    let out = expand_at(raw.clone(), &minted, 1_000);
    assert_eq!(out.providers[0].aws_keys, Some(Box::new(keys("ASIA1"))));
    assert_eq!(out.providers[0].api_key, None);
    assert_eq!(out.providers[1].api_key.as_deref(), Some("ya29.tok"));
    assert!(out.providers[1].aws_keys.is_none());
    assert_eq!(out.providers[2].api_key, None, "no credential yet: none");
    assert_eq!(out.providers[3], raw.providers[3], "providers without credentials are untouched");

    // Ended credentials are not served.
    let later = expand_at(raw.clone(), &minted, 2_000);
    assert!(later.providers[0].aws_keys.is_none() && later.providers[1].api_key.is_none());

    // Nor one minted for another source (the configuration changed since).
    let mut changed = raw.clone();
    changed.providers[1].credentials.as_mut().unwrap().scopes = vec!["https://x/scope".into()];
    assert!(expand_at(changed, &minted, 1_000).providers[1].api_key.is_none());

    // A key that came with the configuration is not kept either.
    let mut stale = raw.clone();
    stale.providers[2].api_key = Some("old".into());
    assert_eq!(expand_at(stale, &minted, 1_000).providers[2].api_key, None);
}

#[test]
fn credentials_and_errors_keep_secrets_out_of_debug() {
    let shown = format!("{:?} {:?}", Credential::Bearer("ya29.secret".into()), Credential::Aws(keys("ASIA1")));
    assert!(!shown.contains("ya29.secret") && !shown.contains("secret\"") && !shown.contains("token\""), "{shown}");
    assert!(shown.contains("ASIA1"), "the key id may show: {shown}");
}

#[test]
fn refreshes_come_a_margin_before_the_end_and_failures_back_off() {
    assert_eq!(refresh_in(3600, 900), Duration::from_secs(2700), "botocore's 15 minutes");
    assert_eq!(refresh_in(3599, 300), Duration::from_secs(3299));
    assert_eq!(refresh_in(600, 900), Duration::from_secs(300), "shorter than the margin: halfway");
    assert_eq!(refresh_in(2, 300), Duration::from_secs(1));
    assert_eq!(refresh_in(0, 300), Duration::from_secs(1), "never a busy loop");
    let waits: Vec<u64> = (0..9).map(|n| backoff(n).as_secs()).collect();
    assert_eq!(waits, [1, 2, 4, 8, 16, 32, 60, 60, 60]);
    assert_eq!(backoff(u32::MAX), Duration::from_secs(60));
    assert_eq!(SourceKind::AwsEnv.margin_secs(), 900);
    assert_eq!(SourceKind::GcpServiceAccount.margin_secs(), 300);
}

pub(super) const STS_OK: &str = r#"<AssumeRoleWithWebIdentityResponse xmlns="https://sts.amazonaws.com/doc/2011-06-15/">
  <AssumeRoleWithWebIdentityResult>
    <SubjectFromWebIdentityToken>system:serviceaccount:gw:ferrogate</SubjectFromWebIdentityToken>
    <Credentials>
      <AccessKeyId>ASIAEXAMPLE</AccessKeyId>
      <SecretAccessKey>wJalr/K7MDENG+bPxRfiCY</SecretAccessKey>
      <SessionToken>IQoJb3&amp;Jp&#x2F;Z2&#61;&lt;x&gt;</SessionToken>
      <Expiration>2099-12-06T08:00:00Z</Expiration>
    </Credentials>
  </AssumeRoleWithWebIdentityResult>
</AssumeRoleWithWebIdentityResponse>"#;

#[test]
fn sts_answers_are_read_with_their_entities() {
    let keys = aws::sts_answer("sts", StatusCode::OK, STS_OK.as_bytes()).unwrap();
    assert_eq!(keys.access_key_id, "ASIAEXAMPLE");
    assert_eq!(keys.secret_access_key, "wJalr/K7MDENG+bPxRfiCY");
    assert_eq!(keys.session_token.as_deref(), Some("IQoJb3&Jp/Z2=<x>"));
    assert_eq!(keys.expires_at, Some(4_100_227_200));
}

#[test]
fn bad_sts_answers_say_what_is_wrong() {
    let err = |status: StatusCode, body: &str| aws::sts_answer("sts", status, body.as_bytes()).unwrap_err().to_string();
    let no_secret = STS_OK.replace("<SecretAccessKey>wJalr/K7MDENG+bPxRfiCY</SecretAccessKey>", "");
    assert!(
        err(StatusCode::OK, &no_secret).contains("no <SecretAccessKey> element"),
        "{}",
        err(StatusCode::OK, &no_secret)
    );
    assert!(err(StatusCode::OK, "{\"json\": true}").contains("no <AssumeRoleWithWebIdentityResponse>"));
    let unclosed = STS_OK.replace("</SessionToken>", "");
    assert!(err(StatusCode::OK, &unclosed).contains("<SessionToken> is not closed"));
    let entity = STS_OK.replace("&amp;", "&nbsp;");
    assert!(err(StatusCode::OK, &entity).contains("&nbsp;"), "{}", err(StatusCode::OK, &entity));
    let date = STS_OK.replace("2099-12-06T08:00:00Z", "tomorrow");
    assert!(err(StatusCode::OK, &date).contains("Expiration"), "{}", err(StatusCode::OK, &date));
    let refused = "<ErrorResponse><Error><Type>Sender</Type><Code>AccessDenied</Code>\
        <Message>Not authorized to perform sts:AssumeRoleWithWebIdentity</Message></Error></ErrorResponse>";
    assert_eq!(
        err(StatusCode::FORBIDDEN, refused),
        "STS sts: 403 Forbidden: AccessDenied: Not authorized to perform sts:AssumeRoleWithWebIdentity"
    );
    assert_eq!(err(StatusCode::BAD_GATEWAY, "<html>echo</html>"), "STS sts: 502 Bad Gateway (17-byte answer)");
}

#[test]
fn the_xml_reader_matches_whole_names_and_self_closing_elements() {
    let doc = "<R><KeyId>a</KeyId><Key>b</Key><Empty/><Spaced attr=\"1\" >c</Spaced></R>";
    assert_eq!(xml::text(doc, &["R", "Key"]).unwrap(), "b");
    assert_eq!(xml::text(doc, &["R", "Empty"]).unwrap(), "");
    assert_eq!(xml::text(doc, &["R", "Spaced"]).unwrap(), "c");
    assert_eq!(xml::text("<R><![CDATA[a&b]]></R>", &["R"]).unwrap(), "a&b");
    assert_eq!(xml::unescape("&#38;&#x26;&quot;&apos;").unwrap(), "&&\"'");
    assert!(xml::unescape("a & b").is_err(), "a bare & is malformed");
    assert!(xml::unescape("&#xD800;").is_err(), "not a character");
}

#[test]
fn oauth_answers_take_expires_in_as_a_number_or_a_string() {
    let ok = |body: &str| http::bearer("t", StatusCode::OK, body.as_bytes(), 1_000).unwrap();
    let with = |token: &str, end: u64| (Credential::Bearer(token.into()), Some(end));
    assert_eq!(ok(r#"{"access_token":"a","expires_in":3599,"token_type":"Bearer"}"#), with("a", 4_599));
    assert_eq!(ok(r#"{"access_token":"b","expires_in":"3599","token_type":"Bearer"}"#), with("b", 4_599));
    assert_eq!(ok(r#"{"access_token":"c","expires_in":60.5}"#), with("c", 1_060));
    assert_eq!(ok(r#"{"access_token":"d"}"#), with("d", 4_600), "an hour when not said");
}

#[test]
fn bad_oauth_answers_give_clear_errors() {
    let err = |status: StatusCode, body: &str| http::bearer("T", status, body.as_bytes(), 0).unwrap_err().to_string();
    assert!(
        err(StatusCode::OK, "<html>").contains("T: not an OAuth token answer"),
        "{}",
        err(StatusCode::OK, "<html>")
    );
    assert!(err(StatusCode::OK, r#"{"token_type":"Bearer"}"#).contains("missing field `access_token`"));
    assert!(err(StatusCode::OK, r#"{"access_token":"a","expires_in":"soon"}"#).contains("expires_in is not a number"));
    assert!(err(StatusCode::OK, r#"{"access_token":"a b"}"#).contains("spaces or control characters"));
    assert!(err(StatusCode::OK, r#"{"access_token":""}"#).contains("empty"));
    let refused = r#"{"error":"invalid_client","error_description":"AADSTS7000215: Invalid client secret provided."}"#;
    assert_eq!(
        err(StatusCode::UNAUTHORIZED, refused),
        "T: 401 Unauthorized: invalid_client: AADSTS7000215: Invalid client secret provided."
    );
    assert_eq!(
        err(StatusCode::NOT_FOUND, "client_secret=hunter2"),
        "T: 404 Not Found (21-byte answer)",
        "no body echoed"
    );
}

#[test]
fn pem_keys_unwrap_to_pkcs1_and_bad_ones_are_named() {
    let pem = include_str!("../../../../testdata/clouds/gcp/test-key.pem");
    let der = der::rsa_private_key(pem).unwrap();
    assert_eq!(der[0], 0x30, "a PKCS#1 sequence");
    assert!(der.len() > 1000);
    assert!(der::rsa_private_key("not a key").unwrap_err().contains("no PEM block"));
    let cert = "-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n";
    assert!(der::rsa_private_key(cert).unwrap_err().contains("not a private key"));
    let truncated = "-----BEGIN PRIVATE KEY-----\nMIIE\n-----END PRIVATE KEY-----\n";
    assert!(der::rsa_private_key(truncated).unwrap_err().contains("truncated"));
    // A P-256 key (PKCS#8) is not an RSA key.
    let ec = "-----BEGIN PRIVATE KEY-----\nMIGHAgEAMBMGByqGSM49AgEGCCqGSM49AwEHBG0wawIBAQQgRDEy4AFacAxa1AULzBdAr/CIEE4+N3jrAmtIsP9sq/ahRANCAARDi1r2suc5r73ad+0WTcCaLZkkqhLqom5TGm6f2bo2iYd+5hSLFn2RyuROI0BfMf1bhcS59kMnXZRDvV+jDNH4\n-----END PRIVATE KEY-----\n";
    assert!(der::rsa_private_key(ec).unwrap_err().contains("not an RSA key"));
}

#[test]
fn environment_keys_follow_botocore() {
    let c = |yaml: &str| serde_saphyr::from_str::<RawCredentials>(yaml).unwrap();
    let defaults = c("source: aws_env");
    let f = fetcher(&[
        ("AWS_ACCESS_KEY_ID", "AKIA1"),
        ("AWS_SECRET_ACCESS_KEY", "s1"),
        ("AWS_SECURITY_TOKEN", "legacy"),
        ("AWS_CREDENTIAL_EXPIRATION", "2099-12-06T08:00:00+01:00"),
    ]);
    let (credential, end) = aws::from_env(&f, &defaults).unwrap();
    let want = RawAwsKeys {
        access_key_id: "AKIA1".into(),
        secret_access_key: "s1".into(),
        session_token: Some("legacy".into()),
        expires_at: Some(4_100_223_600),
    };
    assert_eq!((credential, end), (Credential::Aws(want), Some(4_100_223_600)));

    let named = c("{ source: aws_env, access_key_id_env: K, secret_access_key_env: S, session_token_env: T }");
    let f = fetcher(&[("K", "AKIA2"), ("S", "s2"), ("AWS_SESSION_TOKEN", "other"), ("AWS_CREDENTIAL_EXPIRATION", "x")]);
    let (credential, end) = aws::from_env(&f, &named).unwrap();
    assert_eq!(end, None, "the expiration goes with the default variables");
    assert_eq!(
        credential,
        Credential::Aws(RawAwsKeys {
            access_key_id: "AKIA2".into(),
            secret_access_key: "s2".into(),
            session_token: None,
            expires_at: None
        })
    );

    let err = aws::from_env(&fetcher(&[("AWS_ACCESS_KEY_ID", "AKIA1")]), &defaults).unwrap_err();
    assert_eq!(err.to_string(), "AWS_SECRET_ACCESS_KEY is not set");
    let spaced = fetcher(&[("AWS_ACCESS_KEY_ID", "AKIA 1"), ("AWS_SECRET_ACCESS_KEY", "s")]);
    assert!(!aws::from_env(&spaced, &defaults).unwrap_err().to_string().contains("AKIA"), "never echoed");
}

#[test]
fn endpoints_default_as_the_clouds_sdks_do() {
    assert_eq!(aws::sts_url(None, Some("eu-west-1")), "https://sts.eu-west-1.amazonaws.com/");
    assert_eq!(aws::sts_url(Some("http://127.0.0.1:9/"), Some("eu-west-1")), "http://127.0.0.1:9/");
    assert_eq!(aws::sts_url(None, None), "https://sts.amazonaws.com/");
    let c = |yaml: &str| serde_saphyr::from_str::<RawCredentials>(yaml).unwrap();
    let entra = c("{ source: azure_client_credentials, tenant_id: contoso.onmicrosoft.com }");
    assert_eq!(
        azure::token_url(&fetcher(&[]), &entra).unwrap(),
        "https://login.microsoftonline.com/contoso.onmicrosoft.com/oauth2/v2.0/token"
    );
    let sovereign = fetcher(&[("AZURE_AUTHORITY_HOST", "login.microsoftonline.us/")]);
    assert_eq!(
        azure::token_url(&sovereign, &entra).unwrap(),
        "https://login.microsoftonline.us/contoso.onmicrosoft.com/oauth2/v2.0/token"
    );
    let bad = c("{ source: azure_client_credentials, tenant_id: \"../evil\" }");
    assert!(azure::token_url(&fetcher(&[]), &bad).is_err());
    let key = |uri: &str| {
        gcp::key_file(
            "k.json",
            &format!(r#"{{"type":"service_account","client_email":"a@b","private_key":"p","token_uri":"{uri}"}}"#),
        )
        .unwrap()
    };
    let sa = c("source: gcp_service_account");
    assert_eq!(gcp::token_endpoint(&sa, &key("https://oauth2.example/token")), "https://oauth2.example/token");
    let overridden = c("{ source: gcp_service_account, token_url: \"http://127.0.0.1:9/token\" }");
    assert_eq!(gcp::token_endpoint(&overridden, &key("https://oauth2.example/token")), "http://127.0.0.1:9/token");
    let user = gcp::key_file("k.json", r#"{"type":"authorized_user","client_email":"","private_key":""}"#);
    assert_eq!(
        user.err().unwrap().to_string(),
        "key file k.json: its type is \"authorized_user\", not \"service_account\""
    );
}

#[test]
fn providers_without_a_credentials_block_follow_the_clouds_default_chains() {
    let provider = |yaml: &str| -> RawProvider { serde_saphyr::from_str(yaml).unwrap() };
    let env = |vars: &'static [(&'static str, &'static str)]| {
        move |name: &str| vars.iter().find(|(k, _)| *k == name).map(|(_, v)| v.to_string())
    };
    let bedrock = provider("{name: b, kind: bedrock, region: us-east-1}");
    let kind = |p: &RawProvider, e| Source::of_with(p, e).map(|s| (s.kind, s.settings.key_file));
    assert_eq!(kind(&bedrock, env(&[])), Some((SourceKind::AwsEnv, None)));
    let irsa = env(&[("AWS_WEB_IDENTITY_TOKEN_FILE", "/t"), ("AWS_ROLE_ARN", "arn:aws:iam::1:role/r")]);
    assert_eq!(kind(&bedrock, irsa), Some((SourceKind::AwsWebIdentity, None)));
    let keyed = provider("{name: b, kind: bedrock, region: us-east-1, api_key_env: BEDROCK_KEY}");
    assert_eq!(kind(&keyed, env(&[])), None, "a Bedrock API key is sent as it is");

    let vertex = provider("{name: v, kind: vertex, project: my-proj-1, region: us-east5}");
    assert_eq!(kind(&vertex, env(&[])), Some((SourceKind::GcpMetadata, None)));
    let adc = env(&[("GOOGLE_APPLICATION_CREDENTIALS", "/sa.json")]);
    assert_eq!(kind(&vertex, adc), Some((SourceKind::GcpServiceAccount, None)));
    let named = provider("{name: v, kind: vertex, project: my-proj-1, region: us-east5, credentials_file_env: SA}");
    assert_eq!(kind(&named, env(&[("SA", "/k.json")])), Some((SourceKind::GcpServiceAccount, Some("/k.json".into()))));
    assert_eq!(kind(&named, env(&[])).and_then(|(_, f)| f), Some("$SA (unset)".into()));

    let openai = provider("{name: o, kind: openai, base_url: 'https://api.openai.com'}");
    assert_eq!(kind(&openai, env(&[])), None);
}
