//! The C layouts of `<infiniband/verbs.h>` (rdma-core v44) that programs see.
