/* Checks of a run's training settings (src/train/train_settings.c). */
#ifndef SFB_SRC_TRAIN_SETTINGS_H
#define SFB_SRC_TRAIN_SETTINGS_H

#include <sfb/train.h>

/* 0, or -EINVAL / -SFB_EUSAGE with the setting at fault recorded. */
int sfb__train_validate(const struct sfb_train_settings *s);

#endif
