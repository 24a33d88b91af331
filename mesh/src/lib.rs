//! ttmesh: the user-facing mesh API (placeholder until the mesh issue lands).
