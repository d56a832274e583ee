//! The wasm engine: loading scenario components by hash, limits, and calls into the guest.
