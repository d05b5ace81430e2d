//! The background tasks beside the webhook: each keeps something the request path reads (the
//! policies, the parents of cascades) or acts on what decisions left (reports, silence,
//! suspensions), and each stops on the shutdown token.

pub mod cascade;
pub mod gatepolicies;
pub mod reload;
pub mod reports;
pub mod silence;
pub mod suspensions;
