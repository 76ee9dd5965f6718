//! Node shapes for `vramdoc scan` (and serve, which shares its rules): healthy nodes that
//! must raise nothing at warn/error, and broken ones that must raise the right finding.
