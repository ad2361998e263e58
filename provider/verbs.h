// The verbs the provider implements; every other op stays libibverbs' EOPNOTSUPP dummy.
#pragma once

#include "xroce/provider_abi.h"

namespace xroce::provider {

void free_context(ibv_context* ctx);
extern const verbs_context_ops kContextOps;

}  // namespace xroce::provider
