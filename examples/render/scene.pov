// A sphere circling over a checkered floor: one frame per value of `clock`
// (0 to 1 over the animation), rendered by POV-Ray as a sandboxed exec task.
#include "colors.inc"

camera { location <0, 2.2, -6> look_at <0, 0.6, 0> }
light_source { <4, 6, -5> color White }
plane { y, 0 pigment { checker color White color rgb <0.2, 0.3, 0.8> } }
sphere {
  <2 * cos(2 * pi * clock), 1 + 0.5 * sin(4 * pi * clock), 2 * sin(2 * pi * clock)>, 0.8
  pigment { color rgb <1, 0.4, 0.1> }
  finish { phong 0.8 reflection 0.15 }
}
