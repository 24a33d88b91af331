//! ttmesh-ccl: placeholder until its issue lands.
