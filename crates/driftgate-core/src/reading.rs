//! How a review body is read before it is decided, one way for the webhook and for `eval` and
//! `policy test`: scope is judged from the envelope alone (the caller says how: the webhook
//! with its Namespace cache, `eval` with the Namespace files it was given), a write no policy
//! may guard is never read further, and a guarded one has its objects' heads read in one pass
//! and the rest only when a rule asks ([`read_lazily`]). What that pass cannot read is read
//! whole ([`read_whole`]), which reads any depth and says why an object is unreadable. Which of
//! the two it was is a type ([`Reading`]: [`OnePass`] or [`Whole`]), decided by the reader.
//!
//! Pure: nothing here logs, waits or reaches a cluster.

use kube_core::DynamicObject;
use kube_core::admission::AdmissionRequest;

use crate::request::{FellBack, RequestFacts, WholeFacts};
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

/// How a review was read, decided once, when it is read: the stages after the decision ask it
/// (never the facts) whether what they were given still stands, and for the objects whole.
pub trait Reading: Copy {
    /// What a stage answers when the facts fell back: [`FellBack`] for [`OnePass`]; for
    /// [`Whole`], which never falls back, nothing.
    type Fallback;

    /// Whether what was decided from `facts` stands.
    fn stands(self, facts: &RequestFacts<'_>) -> Result<(), Self::Fallback>;

    /// `facts` with both objects read whole, before work that cannot be taken back.
    fn whole<'f, 'a>(
        self,
        facts: &'f RequestFacts<'a>,
    ) -> Result<WholeFacts<'f, 'a>, Self::Fallback>;
}

/// Read in one pass ([`read_lazily`]): a remainder first asked for may prove unreadable.
#[derive(Clone, Copy, Debug)]
pub struct OnePass;

impl Reading for OnePass {
    type Fallback = FellBack;

    fn stands(self, facts: &RequestFacts<'_>) -> Result<(), FellBack> {
        facts.stands()
    }

    fn whole<'f, 'a>(self, facts: &'f RequestFacts<'a>) -> Result<WholeFacts<'f, 'a>, FellBack> {
        facts.whole()
    }
}

/// Read whole ([`read_whole`]), which never falls back; made only with the facts of a
/// [`ReadReview`], which it vouches for.
#[derive(Clone, Copy, Debug)]
pub struct Whole(());

impl Reading for Whole {
    type Fallback = std::convert::Infallible;

    fn stands(self, _: &RequestFacts<'_>) -> Result<(), Self::Fallback> {
        Ok(())
    }

    fn whole<'f, 'a>(
        self,
        facts: &'f RequestFacts<'a>,
    ) -> Result<WholeFacts<'f, 'a>, Self::Fallback> {
        Ok(WholeFacts::read_whole_already(facts))
    }
}

/// A review as read whole: with its objects, unless no policy may guard it (then they are
/// never read) or they could not be read (`unreadable` says why).
pub struct ReadReview<N> {
    pub request: Review,
    pub namespace: N,
    pub unreadable: Option<ObjectError>,
}

impl<N> ReadReview<N> {
    /// The one description of the request, and the reading that vouches for it.
    pub fn facts(&self) -> (RequestFacts<'_>, Whole) {
        (RequestFacts::new(&self.request), Whole(()))
    }
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
