//! The exit codes of the command line (`--help` and the README list them), one set for every command.

/// Done.
pub const OK: u8 = 0;
/// driftgate refused the write (its admission denial), or a check or policy test failed.
pub const REFUSED: u8 = 1;
/// Bad input: usage, flags, KIND/NAME, kubeconfig or context, or a named object or kind
/// that does not exist.
pub const BAD_INPUT: u8 = 2;
/// The API server could not be reached (refused, timed out, TLS failed).
pub const UNREACHABLE: u8 = 3;
/// Kubernetes RBAC does not permit the request.
pub const FORBIDDEN: u8 = 4;
/// The API server failed the request for another reason (a conflict, a server error).
pub const FAILED: u8 = 5;
