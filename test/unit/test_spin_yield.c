/* The sfb command's pthread_spin_lock (src/launch/spin_yield.c, linked into
 * this program as into sfb): still a lock (exact counts from contending
 * threads, yielding or not); it yields to a holder only when enabled, by
 * default only with SFB_SPIN_YIELD=1; and it is the one this program's calls
 * bind to. */
#include "src/base/util.h"
#include "src/launch/spin_yield.h"
#include "test.h"

#include <pthread.h>
#include <time.h>

#define THREADS 4
#define ROUNDS 100000

struct shared {
    pthread_spinlock_t lock;
    unsigned long counter;
};

static void *hammer(void *arg)
{
    struct shared *s = arg;
    for (int i = 0; i < ROUNDS; i++) {
        pthread_spin_lock(&s->lock);
        unsigned long v = s->counter; /* a read-modify-write a race would lose */
        s->counter = v + 1;
        pthread_spin_unlock(&s->lock);
    }
    return NULL;
}

static int count_with(int yielding)
{
    struct shared s = {.counter = 0};
    ASSERT_EQ(pthread_spin_init(&s.lock, PTHREAD_PROCESS_PRIVATE), 0);
    sfb__spin_yield_set(yielding);
    pthread_t t[THREADS];
    for (int i = 0; i < THREADS; i++) ASSERT_EQ(pthread_create(&t[i], NULL, hammer, &s), 0);
    for (int i = 0; i < THREADS; i++) pthread_join(t[i], NULL);
    sfb__spin_yield_set(0);
    ASSERT_EQ(s.counter, (unsigned long)THREADS * ROUNDS);
    pthread_spin_destroy(&s.lock);
    return 0;
}

static int test_exclusive_spinning(void)
{
    return count_with(0);
}

static int test_exclusive_yielding(void)
{
    return count_with(1);
}

static void *take_once(void *arg)
{
    struct shared *s = arg;
    pthread_spin_lock(&s->lock);
    s->counter++;
    pthread_spin_unlock(&s->lock);
    return NULL;
}

static void nap_ms(int ms)
{
    struct timespec ts = {0, ms * 1000000L};
    nanosleep(&ts, NULL);
}

/* A waiter on a held lock: no yields while disabled, yields once enabled,
 * and it gets the lock when the holder lets go. */
static int test_yields_only_when_enabled(void)
{
    struct shared s = {.counter = 0};
    ASSERT_EQ(pthread_spin_init(&s.lock, PTHREAD_PROCESS_PRIVATE), 0);
    sfb__spin_yield_set(0);
    ASSERT_EQ(sfb__spin_yield_enabled(), 0);
    ASSERT_EQ(pthread_spin_lock(&s.lock), 0);
    pthread_t t;
    ASSERT_EQ(pthread_create(&t, NULL, take_once, &s), 0);
    unsigned long long before = sfb__spin_yields();
    nap_ms(20);
    ASSERT_EQ(sfb__spin_yields(), before); /* spinning, as libc's lock */
    sfb__spin_yield_set(1);
    ASSERT_EQ(sfb__spin_yield_enabled(), 1);
    for (int i = 0; i < 5000 && sfb__spin_yields() == before; i++) nap_ms(1);
    ASSERT_GT(sfb__spin_yields(), before); /* this program's calls bind to spin_yield.c's */
    ASSERT_EQ(s.counter, 0ul);
    pthread_spin_unlock(&s.lock);
    pthread_join(t, NULL);
    ASSERT_EQ(s.counter, 1ul);
    sfb__spin_yield_set(0);
    pthread_spin_destroy(&s.lock);
    return 0;
}

/* The default follows SFB_SPIN_YIELD, read when first needed. */
static int test_environment(void)
{
    unsetenv("SFB_SPIN_YIELD");
    sfb__spin_yield_set(-1);
    ASSERT_EQ(sfb__spin_yield_enabled(), 0);
    setenv("SFB_SPIN_YIELD", "1", 1);
    ASSERT_EQ(sfb__spin_yield_enabled(), 0); /* read once */
    sfb__spin_yield_set(-1);
    ASSERT_EQ(sfb__spin_yield_enabled(), 1);
    setenv("SFB_SPIN_YIELD", "0", 1);
    sfb__spin_yield_set(-1);
    ASSERT_EQ(sfb__spin_yield_enabled(), 0);
    setenv("SFB_SPIN_YIELD", "yes", 1); /* only "1" turns it on */
    sfb__spin_yield_set(-1);
    ASSERT_EQ(sfb__spin_yield_enabled(), 0);
    unsetenv("SFB_SPIN_YIELD");
    sfb__spin_yield_set(0);
    return 0;
}

/* Uncontended: the lock is taken at once and trylock sees it held. */
static int test_uncontended(void)
{
    pthread_spinlock_t l;
    ASSERT_EQ(pthread_spin_init(&l, PTHREAD_PROCESS_SHARED), 0);
    sfb__spin_yield_set(1);
    unsigned long long before = sfb__spin_yields();
    ASSERT_EQ(pthread_spin_lock(&l), 0);
    ASSERT_NE(pthread_spin_trylock(&l), 0);
    ASSERT_EQ(pthread_spin_unlock(&l), 0);
    ASSERT_EQ(pthread_spin_trylock(&l), 0);
    ASSERT_EQ(pthread_spin_unlock(&l), 0);
    ASSERT_EQ(sfb__spin_yields(), before);
    sfb__spin_yield_set(0);
    pthread_spin_destroy(&l);
    return 0;
}

static const struct test_case tests[] = {
    {"exclusive_spinning", test_exclusive_spinning},
    {"exclusive_yielding", test_exclusive_yielding},
    {"yields_only_when_enabled", test_yields_only_when_enabled},
    {"uncontended", test_uncontended},
    {"environment", test_environment},
};
TEST_MAIN(tests)
