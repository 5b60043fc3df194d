/* sfb — umbrella header. */
#ifndef SFB_SFB_H
#define SFB_SFB_H

#include <sfb/version.h>
#include <sfb/common.h>
#include <sfb/data.h>
#include <sfb/sf.h>
#include <sfb/model.h>
#include <sfb/train.h>
#include <sfb/topo.h>
#include <sfb/cost_model.h>
#include <sfb/launch.h>
#include <sfb/job.h>

#endif
