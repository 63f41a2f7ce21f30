/* An MPI program for tests/real_programs.rs: rank 0 and rank 1 exchange 1 MiB messages
 * (each checks every byte it receives), then all ranks sum their rank numbers. Prints
 * "ranks N sum S MB/s X" on rank 0; exits non-zero on a corrupt message. */
#include <mpi.h>
#include <stdio.h>
#include <string.h>

#define SIZE (1 << 20)
#define ITERS 50

static unsigned char buf[SIZE];

static int check(int iter, int from)
{
	for (int i = 0; i < SIZE; i++)
		if (buf[i] != (unsigned char)(iter * 7 + from + i)) {
			fprintf(stderr, "corrupt byte %d of message %d from rank %d\n", i, iter, from);
			return 1;
		}
	return 0;
}

static void fill(int iter, int me)
{
	for (int i = 0; i < SIZE; i++)
		buf[i] = (unsigned char)(iter * 7 + me + i);
}

int main(int argc, char **argv)
{
	int rank, size, bad = 0;

	MPI_Init(&argc, &argv);
	MPI_Comm_rank(MPI_COMM_WORLD, &rank);
	MPI_Comm_size(MPI_COMM_WORLD, &size);
	double t = MPI_Wtime();
	for (int it = 0; it < ITERS && size > 1; it++) {
		if (rank == 0) {
			fill(it, 0);
			MPI_Send(buf, SIZE, MPI_BYTE, 1, 0, MPI_COMM_WORLD);
			MPI_Recv(buf, SIZE, MPI_BYTE, 1, 0, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
			bad |= check(it, 1);
		} else if (rank == 1) {
			MPI_Recv(buf, SIZE, MPI_BYTE, 0, 0, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
			bad |= check(it, 0);
			fill(it, 1);
			MPI_Send(buf, SIZE, MPI_BYTE, 0, 0, MPI_COMM_WORLD);
		}
	}
	double dt = MPI_Wtime() - t;
	long mine = rank, sum = 0;
	int any_bad = 0;
	MPI_Allreduce(&mine, &sum, 1, MPI_LONG, MPI_SUM, MPI_COMM_WORLD);
	MPI_Allreduce(&bad, &any_bad, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
	if (rank == 0)
		printf("ranks %d sum %ld MB/s %.1f\n", size, sum, 2.0 * ITERS * SIZE / dt / 1e6);
	MPI_Finalize();
	return any_bad;
}
