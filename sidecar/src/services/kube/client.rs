//! The few Kubernetes API calls pool discovery makes: a list (its items and
//! `resourceVersion`) and a watch from a `resourceVersion`, read as the API streams it (one
//! JSON event per line).

use std::path::{Path, PathBuf};
use std::time::Duration;

use ferrogate_core::inference_pool::WatchLine;
use serde_json::Value;

/// How long the server keeps a watch open before ending it (the client then resumes from
/// the last `resourceVersion` seen); below the API server's own bound, as client-go's is.
const WATCH_SECONDS: u64 = 290;

/// A failed call.
#[derive(Debug, thiserror::Error)]
pub enum KubeError {
    /// The request did not get an answer.
    #[error("Kubernetes API: {0}")]
    Http(#[from] reqwest::Error),
    /// The API answered with an error status.
    #[error("Kubernetes API: {status} from {path}: {message}")]
    Status {
        /// The path asked.
        path: String,
        /// The HTTP status, or the Status object's `code`.
        status: u16,
        /// The Status object's `message`.
        message: String,
    },
    /// The `resourceVersion` is older than the server keeps (410 Gone): list again.
    #[error("Kubernetes API: resource version expired; listing again")]
    Gone,
    /// Someone else changed or created the object first (409 Conflict).
    #[error("Kubernetes API: conflict; someone else wrote first")]
    Conflict,
    /// An answer that is not what the API sends.
    #[error("Kubernetes API: unexpected answer from {path}: {message}")]
    Shape {
        /// The path asked.
        path: String,
        /// What is wrong with it.
        message: String,
    },
    /// The CA file cannot be read or parsed.
    #[error("Kubernetes API CA {path}: {message}")]
    Ca {
        /// The file.
        path: PathBuf,
        /// Why it cannot be used.
        message: String,
    },
}

/// A Kubernetes API client (cheap to clone).
#[derive(Debug, Clone)]
pub struct Client {
    http: reqwest::Client,
    base: String,
    token: Option<PathBuf>,
}

/// One line of a watch.
#[derive(Debug, PartialEq)]
pub enum Event {
    /// An object appeared or changed (`ADDED`, `MODIFIED`).
    Applied(Value),
    /// An object went (`DELETED`).
    Deleted(Value),
    /// Only the `resourceVersion` advanced (`BOOKMARK`).
    Bookmark,
}

impl Client {
    /// A client of the API at `base`, sending the token `token` holds (when the file exists)
    /// and trusting the certificates in `ca` (else the system's roots).
    ///
    /// # Errors
    /// An unreadable or invalid CA file.
    pub fn new(base: String, token: Option<PathBuf>, ca: Option<&Path>) -> Result<Client, KubeError> {
        let mut builder = reqwest::Client::builder()
            .connect_timeout(Duration::from_secs(10))
            // A watch sends bookmarks or events well within this; silence means a dead link.
            .read_timeout(Duration::from_secs(WATCH_SECONDS + 30));
        if let Some(path) = ca {
            let ca_error = |message: String| KubeError::Ca { path: path.to_path_buf(), message };
            let pem = std::fs::read(path).map_err(|e| ca_error(e.to_string()))?;
            for cert in reqwest::Certificate::from_pem_bundle(&pem).map_err(|e| ca_error(e.to_string()))? {
                builder = builder.add_root_certificate(cert);
            }
        }
        let http = builder.build()?;
        Ok(Client { http, base, token })
    }

    /// GET `path?query`, with the token when there is one.
    async fn get(&self, path: &str, query: &[(&str, &str)]) -> Result<reqwest::Response, KubeError> {
        self.send(self.http.get(format!("{}{path}", self.base)).query(query), path).await
    }

    /// Sends `request` (to `path`) with the token when there is one; an error status is an
    /// error, with the API's own message.
    async fn send(&self, mut request: reqwest::RequestBuilder, path: &str) -> Result<reqwest::Response, KubeError> {
        if let Some(token) = self.token.as_ref().and_then(|t| std::fs::read_to_string(t).ok()) {
            request = request.bearer_auth(token.trim());
        }
        let response = request.send().await?;
        let status = response.status().as_u16();
        match status {
            410 => Err(KubeError::Gone),
            409 => Err(KubeError::Conflict),
            _ if !response.status().is_success() => {
                let body: Value = response.json().await.unwrap_or_default();
                let message = body.get("message").and_then(Value::as_str).unwrap_or("no message").to_string();
                Err(KubeError::Status { path: path.to_string(), status, message })
            }
            _ => Ok(response),
        }
    }

    /// The object at `path`, `None` when it does not exist; bounded by `timeout`.
    pub async fn object(&self, path: &str, timeout: Duration) -> Result<Option<Value>, KubeError> {
        let request = self.http.get(format!("{}{path}", self.base)).timeout(timeout);
        match self.send(request, path).await {
            Ok(response) => Ok(Some(response.json().await?)),
            Err(KubeError::Status { status: 404, .. }) => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// Creates (`POST` to its collection) or replaces (`PUT` to itself, with the
    /// `resourceVersion` it was read at) an object; the object as stored. Bounded by
    /// `timeout`. [`KubeError::Conflict`] when someone else wrote first.
    pub async fn write(&self, create: bool, path: &str, object: &Value, timeout: Duration) -> Result<Value, KubeError> {
        let url = format!("{}{path}", self.base);
        let request = if create { self.http.post(url) } else { self.http.put(url) };
        Ok(self.send(request.json(object).timeout(timeout), path).await?.json().await?)
    }

    /// The items of the collection at `path` that `selector` (`labelSelector=…` or
    /// `fieldSelector=…`) keeps, and the list's `resourceVersion`.
    pub async fn list(&self, path: &str, selector: (&str, &str)) -> Result<(Vec<Value>, String), KubeError> {
        let list: Value = self.get(path, &[selector]).await?.json().await?;
        let shape = |message: &str| KubeError::Shape { path: path.to_string(), message: message.to_string() };
        let rv = list
            .pointer("/metadata/resourceVersion")
            .and_then(Value::as_str)
            .ok_or_else(|| shape("no resourceVersion"))?;
        let items = list.get("items").and_then(Value::as_array).ok_or_else(|| shape("no items"))?;
        Ok((items.clone(), rv.to_string()))
    }

    /// Watches the collection at `path` (as [`Client::list`]) from `rv`.
    pub async fn watch(&self, path: &str, selector: (&str, &str), rv: &str) -> Result<Watch, KubeError> {
        let seconds = WATCH_SECONDS.to_string();
        let query = [
            selector,
            ("watch", "true"),
            ("resourceVersion", rv),
            ("allowWatchBookmarks", "true"),
            ("timeoutSeconds", seconds.as_str()),
        ];
        let response = self.get(path, &query).await?;
        Ok(Watch { response, buf: Vec::new(), path: path.to_string(), rv: rv.to_string() })
    }
}

/// An open watch.
#[derive(Debug)]
pub struct Watch {
    response: reqwest::Response,
    buf: Vec<u8>,
    path: String,
    /// The `resourceVersion` of the last event read: where to resume.
    pub rv: String,
}

impl Watch {
    /// The next event, `None` when the server ended the watch. Cancel-safe: a line is taken
    /// from the buffer only once it is whole.
    ///
    /// # Errors
    /// [`KubeError::Gone`] for an expired `resourceVersion`, another error event or a line
    /// that is not an event.
    pub async fn next(&mut self) -> Result<Option<Event>, KubeError> {
        loop {
            if let Some(end) = memchr::memchr(b'\n', &self.buf) {
                let line: Vec<u8> = self.buf.drain(..=end).collect();
                if line.iter().all(u8::is_ascii_whitespace) {
                    continue;
                }
                return self.event(&line).map(Some);
            }
            match self.response.chunk().await? {
                Some(chunk) => self.buf.extend_from_slice(&chunk),
                None if self.buf.iter().all(u8::is_ascii_whitespace) => return Ok(None),
                None => {
                    let rest = std::mem::take(&mut self.buf);
                    return self.event(&rest).map(Some);
                }
            }
        }
    }

    /// Reads one watch line, advancing [`Watch::rv`].
    fn event(&mut self, line: &[u8]) -> Result<Event, KubeError> {
        let (read, rv) =
            WatchLine::parse(line).map_err(|message| KubeError::Shape { path: self.path.clone(), message })?;
        if let Some(rv) = rv {
            self.rv = rv;
        }
        match read {
            WatchLine::Applied(object) => Ok(Event::Applied(object)),
            WatchLine::Deleted(object) => Ok(Event::Deleted(object)),
            WatchLine::Bookmark => Ok(Event::Bookmark),
            WatchLine::Error(410, _) => Err(KubeError::Gone),
            WatchLine::Error(status, message) => Err(KubeError::Status { path: self.path.clone(), status, message }),
        }
    }
}
