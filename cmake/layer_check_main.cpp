// The program daskcaps_layer_check_<layer> is linked from: it uses nothing,
// so the link only proves that every object of the layer resolves against
// the layers below it (cmake/DaskcapsLayer.cmake).
int main() { return 0; }
