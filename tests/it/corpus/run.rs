//! Job shapes for `vramdoc run` and replays: healthy jobs that must raise nothing at
//! warn/error, and failures that must be named with their right cause and no wrong one.
