//! Soak mode: placeholder until the soak loop lands.
