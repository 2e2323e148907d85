//! Each source against a stand-in of its endpoint over loopback HTTP: STS, Google's token
//! endpoint (the JWT's signature checked with the key's public half), the metadata server and
//! Entra ID (client secret and federated token file).

use std::collections::{HashMap, VecDeque};
use std::sync::Mutex;

use axum::body::Body;
use axum::extract::Request;
use axum::http::HeaderMap;
use jsonwebtoken::jwk::Jwk;
use jsonwebtoken::{Algorithm, DecodingKey, EncodingKey, Validation};
use serde_json::Value;

use super::tests::{fetcher, STS_OK};
use super::*;

/// One request a stand-in received.
#[derive(Debug, Clone)]
pub(super) struct Seen {
    pub method: String,
    pub path: String,
    pub query: Option<String>,
    pub headers: HeaderMap,
    pub body: String,
}

impl Seen {
    /// The body read as a form.
    pub fn form(&self) -> HashMap<String, String> {
        form_urlencoded::parse(self.body.as_bytes()).into_owned().collect()
    }
}

/// Statuses and bodies still to answer.
type Answers = Arc<Mutex<VecDeque<(u16, String)>>>;

/// A loopback HTTP server recording requests and answering from a list (the last answer
/// repeats).
#[derive(Clone)]
pub(super) struct StandIn {
    pub url: String,
    seen: Arc<Mutex<Vec<Seen>>>,
    answers: Answers,
}

impl StandIn {
    pub async fn start(answers: &[(u16, &str)]) -> StandIn {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let answers = answers.iter().map(|(s, b)| (*s, b.to_string())).collect();
        let stand_in = StandIn { url, seen: Arc::default(), answers: Arc::new(Mutex::new(answers)) };
        let handler = stand_in.clone();
        let app = axum::Router::new().fallback(move |req: Request| {
            let handler = handler.clone();
            async move { handler.answer(req).await }
        });
        tokio::spawn(async move { axum::serve(listener, app).await });
        stand_in
    }

    async fn answer(&self, req: Request) -> axum::response::Response {
        let (parts, body) = req.into_parts();
        let body = axum::body::to_bytes(body, 1 << 20).await.unwrap();
        self.seen.lock().unwrap().push(Seen {
            method: parts.method.to_string(),
            path: parts.uri.path().to_string(),
            query: parts.uri.query().map(str::to_string),
            headers: parts.headers,
            body: String::from_utf8_lossy(&body).into_owned(),
        });
        let (status, body) = {
            let mut answers = self.answers.lock().unwrap();
            if answers.len() > 1 {
                answers.pop_front().unwrap()
            } else {
                answers.front().cloned().unwrap()
            }
        };
        axum::response::Response::builder().status(status).body(Body::from(body)).unwrap()
    }

    pub fn seen(&self) -> Vec<Seen> {
        self.seen.lock().unwrap().clone()
    }

    pub fn last(&self) -> Seen {
        self.seen().pop().expect("a request")
    }
}

/// A scratch directory holding `files`.
pub(super) fn scratch(files: &[(&str, &str)]) -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("fg-clouds-{}-{}", std::process::id(), rand::random::<u64>()));
    std::fs::create_dir_all(&dir).unwrap();
    for (name, text) in files {
        std::fs::write(dir.join(name), text).unwrap();
    }
    dir
}

fn source(kind: &str, yaml: &str, region: Option<&str>) -> Source {
    let settings: RawCredentials = serde_saphyr::from_str(yaml).unwrap();
    Source { kind: SourceKind::parse(kind).unwrap(), settings, region: region.map(str::to_string) }
}

fn bearer(minted: (Credential, Option<u64>)) -> String {
    match minted.0 {
        Credential::Bearer(token) => token,
        other => panic!("{other:?}"),
    }
}

#[tokio::test]
async fn sts_trades_the_web_identity_token_for_keys() {
    let sts = StandIn::start(&[(200, STS_OK)]).await;
    let dir = scratch(&[("token", "eyJ.first.sig\n")]);
    let yaml = format!("{{ source: aws_web_identity, token_url: \"{}\" }}", sts.url);
    let s = source("aws_web_identity", &yaml, Some("eu-west-1"));
    let file = dir.join("token").display().to_string();
    let env = [("AWS_ROLE_ARN", "arn:aws:iam::123456789012:role/gw"), ("AWS_WEB_IDENTITY_TOKEN_FILE", file.as_str())];
    let (credential, end) = fetcher(&env).mint(&s).await.unwrap();
    let Credential::Aws(keys) = credential else { panic!("AWS keys expected") };
    assert_eq!((keys.access_key_id.as_str(), keys.session_token.as_deref()), ("ASIAEXAMPLE", Some("IQoJb3&Jp/Z2=<x>")));
    assert_eq!(end, Some(4_100_227_200));
    let seen = sts.last();
    assert_eq!((seen.method.as_str(), seen.path.as_str()), ("POST", "/"));
    assert_eq!(seen.headers["content-type"], "application/x-www-form-urlencoded");
    assert!(seen.headers.get("authorization").is_none(), "unsigned");
    let form = seen.form();
    assert_eq!(form["Action"], "AssumeRoleWithWebIdentity");
    assert_eq!(form["Version"], "2011-06-15");
    assert_eq!(form["RoleArn"], "arn:aws:iam::123456789012:role/gw");
    assert_eq!(form["WebIdentityToken"], "eyJ.first.sig");
    assert!(form["RoleSessionName"].starts_with("ferrogate-"), "{form:?}");

    // The token file is read again (kubelet rotates it); a configured session name is used.
    std::fs::write(dir.join("token"), "eyJ.second.sig").unwrap();
    let yaml = format!(
        "{{ source: aws_web_identity, token_url: \"{}\", role_arn: \"arn:aws:iam::1:role/x\", token_file: \"{}\", session_name: gw-1 }}",
        sts.url,
        dir.join("token").display()
    );
    fetcher(&[]).mint(&source("aws_web_identity", &yaml, None)).await.unwrap();
    let form = sts.last().form();
    assert_eq!((form["WebIdentityToken"].as_str(), form["RoleSessionName"].as_str()), ("eyJ.second.sig", "gw-1"));
    assert_eq!(form["RoleArn"], "arn:aws:iam::1:role/x");
    std::fs::remove_dir_all(dir).unwrap();
}

#[tokio::test]
async fn sts_refusals_name_the_code_never_the_token() {
    let refused = "<ErrorResponse><Error><Code>InvalidIdentityToken</Code><Message>Incorrect token audience</Message></Error></ErrorResponse>";
    let sts = StandIn::start(&[(400, refused)]).await;
    let dir = scratch(&[("token", "eyJ.secret-token.sig")]);
    let yaml = format!(
        "{{ source: aws_web_identity, token_url: \"{}\", role_arn: r, token_file: \"{}\" }}",
        sts.url,
        dir.join("token").display()
    );
    let err = fetcher(&[]).mint(&source("aws_web_identity", &yaml, None)).await.unwrap_err().to_string();
    assert!(err.ends_with("400 Bad Request: InvalidIdentityToken: Incorrect token audience"), "{err}");
    assert!(!err.contains("secret-token"));
    let missing = fetcher(&[]).mint(&source("aws_web_identity", "source: aws_web_identity", None)).await.unwrap_err();
    assert_eq!(missing.to_string(), "credentials.role_arn (or AWS_ROLE_ARN) is not set");
    std::fs::remove_dir_all(dir).unwrap();
}

/// A service-account key file for the test key, its token endpoint `token_uri`.
fn key_file(token_uri: &str) -> String {
    serde_json::json!({
        "type": "service_account",
        "project_id": "my-project-1",
        "private_key_id": "kid-0123",
        "private_key": include_str!("../../../../testdata/clouds/gcp/test-key.pem"),
        "client_email": "gw@my-project-1.iam.gserviceaccount.com",
        "client_id": "1234",
        "token_uri": token_uri,
    })
    .to_string()
}

/// The test key's public half.
fn public_key() -> DecodingKey {
    let der = der::rsa_private_key(include_str!("../../../../testdata/clouds/gcp/test-key.pem")).unwrap();
    let jwk = Jwk::from_encoding_key(&EncodingKey::from_rsa_der(&der), Algorithm::RS256).unwrap();
    DecodingKey::from_jwk(&jwk).unwrap()
}

#[tokio::test]
async fn the_google_token_endpoint_gets_a_signed_jwt_bearer_grant() {
    let google =
        StandIn::start(&[(200, r#"{"access_token":"ya29.first","expires_in":"3599","token_type":"Bearer"}"#)]).await;
    let dir = scratch(&[("key.json", &key_file(&format!("{}/token", google.url)))]);
    let file = dir.join("key.json").display().to_string();
    let env = [("GOOGLE_APPLICATION_CREDENTIALS", file.as_str())];
    let s = source("gcp_service_account", "{ source: gcp_service_account, scopes: [a, b] }", Some("us-central1"));
    let minted = fetcher(&env).mint(&s).await.unwrap();
    assert!(minted.1.unwrap() >= unix_now() + 3598);
    assert_eq!(bearer(minted), "ya29.first");
    let seen = google.last();
    assert_eq!((seen.method.as_str(), seen.path.as_str()), ("POST", "/token"), "the key file's token_uri");
    let form = seen.form();
    assert_eq!(form["grant_type"], "urn:ietf:params:oauth:grant-type:jwt-bearer");
    let header = jsonwebtoken::decode_header(&form["assertion"]).unwrap();
    assert_eq!(
        (header.alg, header.kid.as_deref(), header.typ.as_deref()),
        (Algorithm::RS256, Some("kid-0123"), Some("JWT"))
    );
    let claims = jsonwebtoken::decode::<Value>(&form["assertion"], &public_key(), &google_checks()).unwrap().claims;
    assert_eq!(claims["scope"], "a b");
    assert_eq!(claims["exp"].as_u64().unwrap() - claims["iat"].as_u64().unwrap(), 3600);

    std::fs::remove_dir_all(dir).unwrap();
}

/// The checks Google makes of an assertion: RS256, its audience and issuer, not expired.
fn google_checks() -> Validation {
    let mut checks = Validation::new(Algorithm::RS256);
    checks.set_audience(&[gcp::GOOGLE_TOKEN_URI]);
    checks.set_issuer(&["gw@my-project-1.iam.gserviceaccount.com"]);
    checks
}

#[tokio::test]
async fn token_url_wins_over_token_uri_but_the_audience_stays_googles() {
    let google = StandIn::start(&[(200, r#"{"access_token":"ya29.other","expires_in":3599}"#)]).await;
    let dir = scratch(&[("key.json", &key_file("http://127.0.0.1:9/never"))]);
    let yaml = format!(
        "{{ source: gcp_service_account, key_file: \"{}\", token_url: \"{}/other\" }}",
        dir.join("key.json").display(),
        google.url
    );
    assert_eq!(bearer(fetcher(&[]).mint(&source("gcp_service_account", &yaml, None)).await.unwrap()), "ya29.other");
    let seen = google.last();
    assert_eq!(seen.path, "/other");
    let claims =
        jsonwebtoken::decode::<Value>(&seen.form()["assertion"], &public_key(), &google_checks()).unwrap().claims;
    assert_eq!(claims["scope"], gcp::CLOUD_PLATFORM, "the default scope");
    std::fs::remove_dir_all(dir).unwrap();
}

#[tokio::test]
async fn a_broken_key_file_is_named_without_its_key() {
    let broken = key_file("http://127.0.0.1:9/token").replace("MII", "XXX");
    let dir = scratch(&[("key.json", &broken), ("half.json", "{\"type\":\"service_account\"")]);
    for (file, want) in
        [("key.json", "private_key"), ("half.json", "not a service-account key file"), ("none.json", "cannot read")]
    {
        let yaml = format!("{{ source: gcp_service_account, key_file: \"{}\" }}", dir.join(file).display());
        let err = fetcher(&[]).mint(&source("gcp_service_account", &yaml, None)).await.unwrap_err().to_string();
        assert!(err.contains(want) && !err.contains("XXX"), "{file}: {err}");
    }
    std::fs::remove_dir_all(dir).unwrap();
}

#[tokio::test]
async fn the_metadata_server_is_asked_with_its_flavor_header() {
    let metadata =
        StandIn::start(&[(200, r#"{"access_token":"ya29.meta","expires_in":3599,"token_type":"Bearer"}"#)]).await;
    let host = metadata.url.trim_start_matches("http://");
    let s = source("gcp_metadata", "source: gcp_metadata", None);
    assert_eq!(bearer(fetcher(&[("GCE_METADATA_HOST", host)]).mint(&s).await.unwrap()), "ya29.meta");
    let seen = metadata.last();
    assert_eq!(
        (seen.method.as_str(), seen.path.as_str()),
        ("GET", "/computeMetadata/v1/instance/service-accounts/default/token")
    );
    assert_eq!(seen.headers["metadata-flavor"], "Google");
    assert_eq!(seen.query, None, "the account's own scopes");

    let yaml = format!(
        "{{ source: gcp_metadata, token_url: \"{}/\", scopes: [\"https://x/a\", \"https://x/b\"] }}",
        metadata.url
    );
    fetcher(&[]).mint(&source("gcp_metadata", &yaml, None)).await.unwrap();
    let query = metadata.last().query.unwrap();
    let scopes: HashMap<String, String> = form_urlencoded::parse(query.as_bytes()).into_owned().collect();
    assert_eq!(scopes["scopes"], "https://x/a,https://x/b");
}

const ENTRA_OK: &str =
    r#"{"token_type":"Bearer","expires_in":"3599","ext_expires_in":3599,"access_token":"eyJ0.entra.tok"}"#;

#[tokio::test]
async fn entra_takes_a_client_secret() {
    let entra = StandIn::start(&[(200, ENTRA_OK)]).await;
    let s =
        source("azure_client_credentials", "{ source: azure_client_credentials, client_secret_env: GW_SECRET }", None);
    let env = [
        ("AZURE_AUTHORITY_HOST", entra.url.as_str()),
        ("AZURE_TENANT_ID", "tenant-1"),
        ("AZURE_CLIENT_ID", "app-1"),
        ("GW_SECRET", "s3cr&t"),
    ];
    assert_eq!(bearer(fetcher(&env).mint(&s).await.unwrap()), "eyJ0.entra.tok");
    let seen = entra.last();
    assert_eq!((seen.method.as_str(), seen.path.as_str()), ("POST", "/tenant-1/oauth2/v2.0/token"));
    let form = seen.form();
    assert_eq!(form["grant_type"], "client_credentials");
    assert_eq!(form["client_id"], "app-1");
    assert_eq!(form["scope"], "https://cognitiveservices.azure.com/.default");
    assert_eq!(form["client_secret"], "s3cr&t");
    assert!(!form.contains_key("client_assertion"));

    let refused = r#"{"error":"invalid_client","error_description":"AADSTS7000215: Invalid client secret provided."}"#;
    let entra = StandIn::start(&[(401, refused)]).await;
    let env = [
        ("AZURE_AUTHORITY_HOST", entra.url.as_str()),
        ("AZURE_TENANT_ID", "tenant-1"),
        ("AZURE_CLIENT_ID", "app-1"),
        ("GW_SECRET", "s3cr&t"),
    ];
    let err = fetcher(&env).mint(&s).await.unwrap_err().to_string();
    assert!(err.ends_with("401 Unauthorized: invalid_client: AADSTS7000215: Invalid client secret provided."), "{err}");
    assert!(!err.contains("s3cr"));
}

#[tokio::test]
async fn entra_takes_a_federated_token_file_read_at_each_fetch() {
    let entra = StandIn::start(&[(200, ENTRA_OK)]).await;
    let dir = scratch(&[("azure-identity-token", "eyJ.federated.one\n")]);
    let yaml = format!(
        "{{ source: azure_client_credentials, tenant_id: t, client_id: c, token_url: \"{}/custom\" }}",
        entra.url
    );
    let s = source("azure_client_credentials", &yaml, None);
    let f = fetcher(&[("AZURE_FEDERATED_TOKEN_FILE", dir.join("azure-identity-token").to_str().unwrap())]);
    f.mint(&s).await.unwrap();
    std::fs::write(dir.join("azure-identity-token"), "eyJ.federated.two").unwrap();
    f.mint(&s).await.unwrap();
    let seen = entra.seen();
    assert_eq!(seen[0].path, "/custom");
    let forms: Vec<_> = seen.iter().map(Seen::form).collect();
    assert_eq!(forms[0]["client_assertion_type"], "urn:ietf:params:oauth:client-assertion-type:jwt-bearer");
    assert_eq!(
        (forms[0]["client_assertion"].as_str(), forms[1]["client_assertion"].as_str()),
        ("eyJ.federated.one", "eyJ.federated.two")
    );
    assert!(!forms[0].contains_key("client_secret"));
    let none = fetcher(&[]).mint(&source("azure_client_credentials", &yaml, None)).await.unwrap_err();
    assert!(none.to_string().contains("AZURE_FEDERATED_TOKEN_FILE is not set"), "{none}");
    std::fs::remove_dir_all(dir).unwrap();
}
