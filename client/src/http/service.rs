//! The service the layer wraps around yours: it plans each request, passes on what it does not
//! limit, answers a caller on the deny list itself, and hands a limited request to a
//! [`ResponseFuture`] that checks it against Redis before your service sees it.

use super::body::LimitedBody;
use super::check::enforce;
use super::config::Config;
use super::future::ResponseFuture;
use super::metrics::record;
use super::plan::Step;
use super::response::forbidden;
use crate::limiter::Limiter;
use http::{Request, Response};
use std::fmt;
use std::sync::Arc;
use std::task::{Context, Poll};

/// The service the layer wraps around yours.
#[derive(Clone)]
pub struct RateLimit<S> {
    inner: S,
    config: Arc<Config>,
}

impl<S> RateLimit<S> {
    pub(super) fn new(inner: S, config: Arc<Config>) -> RateLimit<S> {
        RateLimit { inner, config }
    }

    /// The wrapped service.
    pub fn get_ref(&self) -> &S {
        &self.inner
    }

    /// The wrapped service, mutably.
    pub fn get_mut(&mut self) -> &mut S {
        &mut self.inner
    }

    /// Unwraps the service.
    pub fn into_inner(self) -> S {
        self.inner
    }

    /// The limiter this service checks with.
    pub fn limiter(&self) -> &Limiter {
        &self.config.limiter
    }
}

impl<S: fmt::Debug> fmt::Debug for RateLimit<S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RateLimit").field("inner", &self.inner).field("config", &self.config).finish()
    }
}

impl<S, B, ResBody> tower_service::Service<Request<B>> for RateLimit<S>
where
    S: tower_service::Service<Request<B>, Response = Response<ResBody>> + Clone + Send + 'static,
    S::Future: Send,
    B: Send + 'static,
    ResBody: From<String> + Send + 'static,
{
    type Response = Response<LimitedBody<ResBody>>;
    type Error = S::Error;
    type Future = ResponseFuture<S, B>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), S::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: Request<B>) -> Self::Future {
        let (parts, body) = request.into_parts();
        let plan = match self.config.plan(&parts) {
            None => return ResponseFuture::serving(self.inner.call(Request::from_parts(parts, body))),
            Some(Step::Refuse(route)) => {
                record(&route, &route, "denylisted");
                return ResponseFuture::answered(forbidden());
            }
            Some(Step::Allowlisted(route)) => {
                record(&route, &route, "allowlisted");
                return ResponseFuture::serving(self.inner.call(Request::from_parts(parts, body)));
            }
            Some(Step::Limit(plan)) => plan,
        };
        // The instance that was polled ready serves this request, once the checks let it through; a
        // fresh clone stays for the next.
        let clone = self.inner.clone();
        let ready = std::mem::replace(&mut self.inner, clone);
        let checks = Box::pin(enforce(Arc::clone(&self.config), plan));
        ResponseFuture::checking(checks, ready, Request::from_parts(parts, body))
    }
}
