#include "sfb/sfb.h"
#include <stdio.h>
int main(void)
{
    printf("sfb %s\n", sfb_version());
    return 0;
}
