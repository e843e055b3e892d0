//! The response body the layer sends: yours, holding the request's concurrency permit until the
//! body has been sent or dropped (a client that disconnects mid-response frees its slot), not
//! just until the handler returned the headers.

use crate::permit::Permit;
use http_body::{Body, Frame, SizeHint};
use std::pin::Pin;
use std::task::{Context, Poll};

pin_project_lite::pin_project! {
    /// Your response body, and the permit (if any) the request holds while it is sent.
    pub struct LimitedBody<B> {
        #[pin]
        inner: B,
        permit: Option<Permit>,
    }
}

impl<B> LimitedBody<B> {
    pub(crate) fn new(inner: B, permit: Option<Permit>) -> LimitedBody<B> {
        LimitedBody { inner, permit }
    }

    /// The body inside.
    pub fn into_inner(self) -> B {
        self.inner
    }
}

impl<B: Body> Body for LimitedBody<B> {
    type Data = B::Data;
    type Error = B::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Self::Data>, Self::Error>>> {
        let this = self.project();
        let frame = this.inner.poll_frame(cx);
        if let Poll::Ready(None) = frame {
            // Sent: the slot is free before the connection is (kept alive, it may idle for long).
            this.permit.take();
        }
        frame
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

impl<B> std::fmt::Debug for LimitedBody<B> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LimitedBody").field("holds_permit", &self.permit.is_some()).finish_non_exhaustive()
    }
}
