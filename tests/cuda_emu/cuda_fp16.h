// Stand-in for the CUDA header of this name: see cuda_emu.h.
#include "cuda_emu.h"
