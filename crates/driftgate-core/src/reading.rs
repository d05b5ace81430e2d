//! How a review body is read before it is decided, one way for the webhook and for `eval` and
//! `policy test`: scope is judged from the envelope alone (the caller says how: the webhook
//! with its Namespace cache, `eval` with the Namespace files it was given), a write no policy
//! may guard is never read further, and a guarded one has its objects' heads read in one pass
//! and the rest only when a rule asks ([`read_lazily`]). What that pass cannot read is read
//! whole ([`read_whole`]), which reads any depth and says why an object is unreadable.
//!
//! Pure: nothing here logs, waits or reaches a cluster.

use kube_core::DynamicObject;
use kube_core::admission::AdmissionRequest;

use crate::request::RequestFacts;
use crate::review::lazy::{LazyEnvelope, LazyReview};
use crate::review::{Envelope, ObjectError, Review, Unreadable};

/// A review read in one pass: without its objects when no policy may guard the write,
/// else with their heads read and their remainders left for the rules that ask.
// One lives per request, on its stack, moved once: boxing either variant would cost an
// allocation per review to save a copy.
#[allow(clippy::large_enum_variant)]
pub enum LazyRead<'a> {
    Unguarded(AdmissionRequest<DynamicObject>),
    Guarded(LazyReview<'a>),
}

impl LazyRead<'_> {
    /// The one description of the request, for the decision, its Events and the log line.
    pub fn facts(&self) -> RequestFacts<'_> {
        match self {
            LazyRead::Unguarded(request) => RequestFacts::new(request),
            LazyRead::Guarded(review) => RequestFacts::of_lazy(review),
        }
    }
}

/// Reads `envelope` as far as `scope` (whether a policy may guard the write, and the Namespace
/// that scope was judged with) calls for; `None` when an object's head is not readable, for
/// [`read_whole`] to say why.
pub fn read_lazily<'a, N>(
    envelope: LazyEnvelope<'a>,
    scope: impl FnOnce(&AdmissionRequest<DynamicObject>) -> (bool, N),
) -> Option<(LazyRead<'a>, N)> {
    let (guarded, namespace) = scope(envelope.request());
    if !guarded {
        return Some((LazyRead::Unguarded(envelope.without_objects()), namespace));
    }
    let review = envelope.read_heads()?;
    Some((LazyRead::Guarded(review), namespace))
}

/// A review as read whole: with its objects, unless no policy may guard it (then they are
/// never read) or they could not be read (`unreadable` says why).
pub struct ReadReview<N> {
    pub request: Review,
    pub namespace: N,
    pub unreadable: Option<ObjectError>,
}

/// Reads the objects of a review only when `scope` says a policy may guard its write, judged
/// from the envelope alone, so that nothing in its objects (depth, size, validity) can turn an
/// unguarded write into an error.
pub fn read_whole<N>(
    envelope: Envelope<'_>,
    scope: impl FnOnce(&AdmissionRequest<DynamicObject>) -> (bool, N),
) -> ReadReview<N> {
    let (guarded, namespace) = scope(envelope.request());
    if !guarded {
        return ReadReview {
            request: envelope.without_objects(),
            namespace,
            unreadable: None,
        };
    }
    match envelope.read_objects() {
        Ok(request) => ReadReview {
            request,
            namespace,
            unreadable: None,
        },
        Err(Unreadable { review, error }) => ReadReview {
            request: review,
            namespace,
            unreadable: Some(error),
        },
    }
}
