from farm.cli import main

main()
