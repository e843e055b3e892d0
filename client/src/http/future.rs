//! The future of a request the layer let through or answered: for a limited request, the checks
//! against Redis, then your service, then the `RateLimit-*` fields on its response ("enforce, then
//! decorate"), as a state machine you can name.

use super::body::LimitedBody;
use super::check::{Checks, Verdict};
use super::response::RateHeaders;
use crate::permit::Permit;
use http::{Request, Response};
use pin_project_lite::pin_project;
use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::task::{ready, Context, Poll};
use tower_service::Service;

pin_project! {
    /// The response future of [`RateLimit`](super::RateLimit), the service the layer wraps around
    /// `S`, for requests of body `B`. A limited request is first checked against Redis (the one
    /// boxed future of the request: the checks are async functions, whose futures have no name);
    /// once they let it through, `S` is called and its response gets the `RateLimit-*` fields and a
    /// body holding the request's concurrency slots, if any. A request the layer does not limit is
    /// `S`'s own future, unboxed.
    pub struct ResponseFuture<S, B>
    where
        S: Service<Request<B>>,
    {
        #[pin]
        state: State<S, B, S::Future>,
    }
}

pin_project! {
    #[project = StateProj]
    enum State<S, B, F> {
        /// Redis is deciding; the request waits with the service instance that was polled ready.
        Checking { checks: Checks, pending: Option<(S, Request<B>)> },
        /// The service is answering; its response gets `headers`, its body holds `permit`.
        Serving {
            #[pin]
            response: F,
            headers: Option<RateHeaders>,
            permit: Option<Permit>,
        },
        /// The layer answered by itself (a caller on the deny list).
        Answered { response: Option<Response<String>> },
    }
}

impl<S: Service<Request<B>>, B> ResponseFuture<S, B> {
    /// Checks the request with `checks`, then has `service` (polled ready) serve it.
    pub(super) fn checking(checks: Checks, service: S, request: Request<B>) -> Self {
        ResponseFuture { state: State::Checking { checks, pending: Some((service, request)) } }
    }

    /// The service's answer to a request the layer does not limit, passed on as it is.
    pub(super) fn serving(response: S::Future) -> Self {
        ResponseFuture { state: State::Serving { response, headers: None, permit: None } }
    }

    /// The layer's own answer, without calling the service.
    pub(super) fn answered(response: Response<String>) -> Self {
        ResponseFuture { state: State::Answered { response: Some(response) } }
    }
}

impl<S, B, ResBody> Future for ResponseFuture<S, B>
where
    S: Service<Request<B>, Response = Response<ResBody>>,
    ResBody: From<String>,
{
    type Output = Result<Response<LimitedBody<ResBody>>, S::Error>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let mut state = self.project().state;
        loop {
            match state.as_mut().project() {
                StateProj::Checking { checks, pending } => {
                    let (headers, permit) = match ready!(checks.as_mut().poll(cx)) {
                        Verdict::Denied(answer) => return Poll::Ready(Ok(unheld(answer))),
                        Verdict::Served { headers, permit } => (headers, permit),
                    };
                    let (mut service, request) =
                        pending.take().expect("ResponseFuture polled after completion");
                    let response = service.call(request);
                    state.set(State::Serving { response, headers, permit });
                }
                StateProj::Serving { response, headers, permit } => {
                    let result = ready!(response.poll(cx));
                    // A failed or panicking service drops the permit here or with this future: the
                    // slots are released at once.
                    let permit = permit.take();
                    let mut response = result?;
                    if let Some(headers) = headers.take() {
                        headers.add_to(response.headers_mut());
                    }
                    return Poll::Ready(Ok(response.map(|b| LimitedBody::new(b, permit))));
                }
                StateProj::Answered { response } => {
                    let answer = response.take().expect("ResponseFuture polled after completion");
                    return Poll::Ready(Ok(unheld(answer)));
                }
            }
        }
    }
}

/// The layer's own answer in the service's body type, holding no slot.
fn unheld<ResBody: From<String>>(answer: Response<String>) -> Response<LimitedBody<ResBody>> {
    answer.map(|body| LimitedBody::new(ResBody::from(body), None))
}

impl<S: Service<Request<B>>, B> fmt::Debug for ResponseFuture<S, B> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let state = match &self.state {
            State::Checking { .. } => "checking",
            State::Serving { .. } => "serving",
            State::Answered { .. } => "answered",
        };
        f.debug_struct("ResponseFuture").field("state", &state).finish()
    }
}
