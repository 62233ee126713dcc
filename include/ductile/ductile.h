// ductile: a parameter server for distributed training.
//
// Start here: client.h (workers push and pull), table.h (update rules and
// initializers), server.h and coordinator.h (embedding the cluster's
// processes in a program), admin.h (inspecting a running cluster),
// status.h (error reporting).
#ifndef DUCTILE_DUCTILE_H_
#define DUCTILE_DUCTILE_H_

#include "ductile/admin.h"
#include "ductile/client.h"
#include "ductile/coordinator.h"
#include "ductile/limits.h"
#include "ductile/policy.h"
#include "ductile/security.h"
#include "ductile/server.h"
#include "ductile/status.h"
#include "ductile/table.h"

#endif  // DUCTILE_DUCTILE_H_
