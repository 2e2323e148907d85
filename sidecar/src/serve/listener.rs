//! The listeners of `serve` and `sidecar`: each bound at start (so a busy address fails at
//! once, named with the flag that moves it) and listening once what it serves is ready; the
//! HTTP services of the sidecar and admin listeners.

use std::net::SocketAddr;

use tokio::sync::watch;

use super::ServeError;

/// The listeners of `serve` and `sidecar`, named in bind errors with the flag that moves each.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Listener {
    /// The data plane (`serve` only).
    Gateway,
    /// The filter-facing API (snapshots, usage).
    Sidecar,
    /// Health, metrics and the admin API.
    Admin,
    /// The Endpoint Picker's ext_proc gRPC service (`serve --epp-listen`).
    Epp,
}

impl Listener {
    /// What the listener is, in words.
    pub fn name(self) -> &'static str {
        match self {
            Listener::Gateway => "gateway",
            Listener::Sidecar => "filter-facing sidecar API",
            Listener::Admin => "admin API",
            Listener::Epp => "endpoint picker (ext_proc gRPC)",
        }
    }

    /// The command-line flag that sets its address.
    pub fn flag(self) -> &'static str {
        match self {
            Listener::Gateway => "--listen",
            Listener::Sidecar => "--sidecar-listen",
            Listener::Admin => "--admin-listen",
            Listener::Epp => "--epp-listen",
        }
    }

    /// Binds `addr` for this listener without listening yet: a taken address fails here, at
    /// once, while connections are only accepted (queued) once `listen` is called, when the
    /// process is ready to serve them.
    pub fn reserve(self, addr: SocketAddr) -> Result<tokio::net::TcpSocket, ServeError> {
        let bind_error = |source| ServeError::Bind { listener: self, addr, source };
        let socket = if addr.is_ipv4() { tokio::net::TcpSocket::new_v4() } else { tokio::net::TcpSocket::new_v6() }
            .map_err(bind_error)?;
        socket.set_reuseaddr(true).map_err(bind_error)?;
        socket.bind(addr).map_err(bind_error)?;
        Ok(socket)
    }

    /// Binds and listens on `addr` for this listener, naming it in the error.
    pub fn bind(self, addr: SocketAddr) -> Result<tokio::net::TcpListener, ServeError> {
        listen(self.reserve(addr)?)
    }
}

/// Starts listening on a reserved socket (the backlog tokio's own `bind` uses).
pub(super) fn listen(socket: tokio::net::TcpSocket) -> Result<tokio::net::TcpListener, ServeError> {
    Ok(socket.listen(1024)?)
}

/// Serves `router` on `addr` until shutdown (with a span per request when traces are
/// exported); returns the bound address.
pub(crate) async fn spawn_router(
    which: Listener,
    addr: SocketAddr,
    router: axum::Router,
    shutdown: watch::Receiver<bool>,
) -> Result<SocketAddr, ServeError> {
    serve_router(which.bind(addr)?, router, shutdown)
}

/// Serves `router` on a listening socket until shutdown; returns its address.
pub(super) fn serve_router(
    listener: tokio::net::TcpListener,
    router: axum::Router,
    mut shutdown: watch::Receiver<bool>,
) -> Result<SocketAddr, ServeError> {
    let bound = listener.local_addr()?;
    let router = crate::telemetry::http::traced(router);
    tokio::spawn(async move {
        let stop = async move {
            let _ = shutdown.changed().await;
        };
        // No Nagle delay on small writes (streamed or chunked answers, the filter's calls).
        let listener = axum::serve::ListenerExt::tap_io(listener, |tcp| {
            let _ = tcp.set_nodelay(true);
        });
        // The peer address reaches handlers as `ConnectInfo` (admin login throttling and audit
        // records name the source address).
        let service = router.into_make_service_with_connect_info::<SocketAddr>();
        if let Err(e) = axum::serve(listener, service).with_graceful_shutdown(stop).await {
            tracing::error!(error = %e, %bound, "listener failed");
        }
    });
    Ok(bound)
}
