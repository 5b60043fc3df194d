#include "test.h"
static int t(void){return 0;}
static const struct test_case tests[]={{"t",t}};
TEST_MAIN(tests)
