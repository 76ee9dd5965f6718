//! Byte quantities: parsing user-written sizes (`24GiB`, `512MiB`, `1.5GB`) and formatting
//! them for people (`23.50 GiB`). Defined once in `vramdoc-gpu-spec`, so box specs, flags and
//! every output agree; re-exported here for the rest of vramdoc.

pub use vramdoc_gpu_spec::units::*;
