/* The rdma-core headers the bindings are generated from. verbs.h is required; the others are
 * generated when the system has them, and build.rs reports which were found. */
#include <infiniband/verbs.h>
#if __has_include(<infiniband/mlx5dv.h>)
#include <infiniband/mlx5dv.h>
#endif
#if __has_include(<infiniband/efadv.h>)
#include <infiniband/efadv.h>
#endif
#if __has_include(<rdma/rdma_cma.h>)
#include <rdma/rdma_cma.h>
#endif
