// Clang's thread-safety annotations (-Wthread-safety), in the style of
// leveldb's port/thread_annotations.h. Other compilers ignore them.
//
// Members protected by a mutex say so with GUARDED_BY(mu_); functions that
// must be called with it held say REQUIRES(mu_). The clang build in CI
// (DUCTILE_THREAD_SAFETY=ON) turns every violation into an error.
#ifndef DUCTILE_UTIL_THREAD_ANNOTATIONS_H_
#define DUCTILE_UTIL_THREAD_ANNOTATIONS_H_

#if defined(__clang__)
#define DUCTILE_THREAD_ANNOTATION(x) __attribute__((x))
#else
#define DUCTILE_THREAD_ANNOTATION(x)
#endif

#define CAPABILITY(x) DUCTILE_THREAD_ANNOTATION(capability(x))
#define SCOPED_CAPABILITY DUCTILE_THREAD_ANNOTATION(scoped_lockable)
#define GUARDED_BY(x) DUCTILE_THREAD_ANNOTATION(guarded_by(x))
#define PT_GUARDED_BY(x) DUCTILE_THREAD_ANNOTATION(pt_guarded_by(x))
#define ACQUIRED_AFTER(...) \
  DUCTILE_THREAD_ANNOTATION(acquired_after(__VA_ARGS__))
#define ACQUIRED_BEFORE(...) \
  DUCTILE_THREAD_ANNOTATION(acquired_before(__VA_ARGS__))
#define REQUIRES(...) \
  DUCTILE_THREAD_ANNOTATION(requires_capability(__VA_ARGS__))
#define ACQUIRE(...) DUCTILE_THREAD_ANNOTATION(acquire_capability(__VA_ARGS__))
#define RELEASE(...) DUCTILE_THREAD_ANNOTATION(release_capability(__VA_ARGS__))
#define EXCLUDES(...) DUCTILE_THREAD_ANNOTATION(locks_excluded(__VA_ARGS__))
#define ASSERT_CAPABILITY(x) DUCTILE_THREAD_ANNOTATION(assert_capability(x))
#define RETURN_CAPABILITY(x) DUCTILE_THREAD_ANNOTATION(lock_returned(x))
#define NO_THREAD_SAFETY_ANALYSIS \
  DUCTILE_THREAD_ANNOTATION(no_thread_safety_analysis)

#endif  // DUCTILE_UTIL_THREAD_ANNOTATIONS_H_
